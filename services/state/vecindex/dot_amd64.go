package vecindex

import "golang.org/x/sys/cpu"

// useAVX2: the machine has AVX2 and FMA (dot_amd64.s).
var useAVX2 = cpu.X86.HasAVX2 && cpu.X86.HasFMA

//go:noescape
func dotAVX2(a, b *float32, n int) float32

// Dot is the dot product of a and b[:len(a)]: with AVX2 and FMA where the
// machine has them (8 products per instruction), else dotGo.
func Dot(a, b []float32) float32 {
	b = b[:len(a)]
	if useAVX2 && len(a) > 0 {
		return dotAVX2(&a[0], &b[0], len(a))
	}
	return dotGo(a, b)
}
