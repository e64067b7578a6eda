package sandbox

import (
	"strings"
	"testing"
)

func TestParseSubIDs(t *testing.T) {
	const file = `# comment
root:100000:65536
alice:165536:65536
1001:231072:65536
bob:notanumber:65536
carol:0:65536
dave:4294967290:100
erin:300000:0
frank:400000:200000
alice:500000:65536
`
	for _, c := range []struct {
		name string
		id   int
		want IDRange
		ok   bool
	}{
		{"alice", 1000, IDRange{First: 165536, Count: 65536}, true}, // the first of two lines
		{"nobody-here", 1001, IDRange{First: 231072, Count: 65536}, true},
		{"frank", 1002, IDRange{First: 400000, Count: maxSubIDs}, true}, // capped
		{"bob", 1003, IDRange{}, false},                                 // malformed
		{"carol", 1004, IDRange{}, false},                               // includes id 0
		{"dave", 1005, IDRange{}, false},                                // past 2^32-1
		{"erin", 1006, IDRange{}, false},                                // empty
		{"zed", 1007, IDRange{}, false},                                 // absent
		{"", 1008, IDRange{}, false},
	} {
		got, ok := parseSubIDs(strings.NewReader(file), c.name, c.id)
		if got != c.want || ok != c.ok {
			t.Errorf("parseSubIDs(%s, %d) = %v, %v; want %v, %v", c.name, c.id, got, ok, c.want, c.ok)
		}
	}
}

// FuzzParseSubIDs: any /etc/subuid content gives no range or a valid one
// (no id 0, within 32 bits, at most maxSubIDs ids).
func FuzzParseSubIDs(f *testing.F) {
	f.Add("amtest:100000:65536\n", "amtest", 999)
	f.Add("999:1:4294967294\n", "x", 999)
	f.Add("a:b:c:d\n::\n\n#\n", "", 0)
	f.Fuzz(func(t *testing.T, content, name string, id int) {
		r, ok := parseSubIDs(strings.NewReader(content), name, id)
		if !ok {
			if r != (IDRange{}) {
				t.Fatalf("no range but %v", r)
			}
			return
		}
		if r.First <= 0 || r.Count <= 0 || r.Count > maxSubIDs || r.First+r.Count > 1<<32-1 {
			t.Fatalf("invalid range %v from %q", r, content)
		}
	})
}
