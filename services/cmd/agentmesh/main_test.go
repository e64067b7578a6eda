package main

import "testing"

// The server's GC target is serverGCPercent unless GOGC is in the
// environment, which is left to the runtime (even when empty or "off").
func TestGCPercent(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want int
	}{
		{map[string]string{}, serverGCPercent},
		{map[string]string{"GOMEMLIMIT": "1GiB"}, serverGCPercent},
		{map[string]string{"GOGC": "100"}, -1},
		{map[string]string{"GOGC": "off"}, -1},
		{map[string]string{"GOGC": ""}, -1},
	} {
		lookup := func(k string) (string, bool) { v, ok := c.env[k]; return v, ok }
		if got := gcPercent(lookup); got != c.want {
			t.Errorf("gcPercent(%v) = %d, want %d", c.env, got, c.want)
		}
	}
}
