//go:build !amd64

package vecindex

// Dot is the dot product of a and b[:len(a)].
func Dot(a, b []float32) float32 { return dotGo(a, b) }
