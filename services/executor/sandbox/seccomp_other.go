//go:build !amd64 && !arm64

package sandbox

const (
	auditArch = 0
	x32Bit    = 0
)
