//go:build !amd64

package vecindex

func useAVX2AndFMA() bool { return false }
