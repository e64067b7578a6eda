package envconf

import (
	"errors"
	"testing"
	"time"
)

func TestReader(t *testing.T) {
	get := Map(map[string]string{
		"N": " 12 ", "BADN": "twelve", "D": "1m30s", "BADD": "soon", "B": "true", "BADB": "yes please",
		"SIZE": "16MiB", "BADSIZE": "16 parsecs", "L": "a, b,,c ", "P": "k=v, x = y", "BADP": "k",
		"DUPP": "k=1,k=2", "E": "strict", "F": "0.5", "BADF": "NaN",
	})
	r := New(get)
	if got := r.Int("N"); got != 12 {
		t.Errorf("Int: got %d, want 12", got)
	}
	if got := r.Duration("D"); got != 90*time.Second {
		t.Errorf("Duration: got %v, want 1m30s", got)
	}
	if !r.Bool("B") {
		t.Errorf("Bool: got false, want true")
	}
	if got := r.Bytes("SIZE"); got != 16<<20 {
		t.Errorf("Bytes: got %d, want %d", got, 16<<20)
	}
	if got := r.List("L"); len(got) != 3 || got[0] != "a" || got[1] != "b" || got[2] != "c" {
		t.Errorf("List: got %q, want [a b c]", got)
	}
	if got := r.Pairs("P"); len(got) != 2 || got["k"] != "v" || got["x"] != "y" {
		t.Errorf("Pairs: got %v", got)
	}
	if got := r.Enum("E", "strict", "none"); got != "strict" {
		t.Errorf("Enum: got %q", got)
	}
	if got := r.Float("F"); got != 0.5 {
		t.Errorf("Float: got %v", got)
	}
	if got := r.Int("UNSET"); got != 0 || r.Err() != nil {
		t.Errorf("unset: got %d, %v; want 0, nil", got, r.Err())
	}
	if r.Err() != nil {
		t.Fatalf("no error expected, got %v", r.Err())
	}
}

func TestReaderNamesTheVariable(t *testing.T) {
	cases := []struct {
		name string
		read func(r *Reader)
	}{
		{"BADN", func(r *Reader) { r.Int("BADN") }},
		{"BADD", func(r *Reader) { r.Duration("BADD") }},
		{"BADB", func(r *Reader) { r.Bool("BADB") }},
		{"BADSIZE", func(r *Reader) { r.Bytes("BADSIZE") }},
		{"BADP", func(r *Reader) { r.Pairs("BADP") }},
		{"DUPP", func(r *Reader) { r.Pairs("DUPP") }},
		{"E", func(r *Reader) { r.Enum("E", "a", "b") }},
		{"BADF", func(r *Reader) { r.Float("BADF") }},
		{"N", func(r *Reader) { r.IntRange("N", 1, 10) }},
	}
	get := Map(map[string]string{"BADN": "x", "BADD": "x", "BADB": "x", "BADSIZE": "x", "BADP": "k", "DUPP": "k=1,k=2", "E": "c", "BADF": "Inf", "N": "12"})
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := New(get)
			c.read(r)
			var e *Error
			if !errors.As(r.Err(), &e) || e.Name != c.name {
				t.Fatalf("got %v, want an *Error naming %s", r.Err(), c.name)
			}
		})
	}
}

func TestFirstErrorKept(t *testing.T) {
	r := New(Map(map[string]string{"A": "x", "B": "y"}))
	r.Int("A")
	r.Int("B")
	r.Fail("B", "also bad")
	var e *Error
	if !errors.As(r.Err(), &e) || e.Name != "A" {
		t.Fatalf("got %v, want the error of A", r.Err())
	}
}

func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"1", "16MiB", "1g", "-1", "9999999999999999999G", "k"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseBytes(s)
		if err == nil && n < 0 {
			t.Fatalf("ParseBytes(%q) = %d, a negative size", s, n)
		}
	})
}
