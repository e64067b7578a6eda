// Package envconf reads a service's settings (its AGENTMESH_* variables)
// into its Config, one typed getter a value, and keeps the first bad value
// as an error that names the variable, so that a service refuses to start
// saying which setting is wrong and why.
//
// Each service's config.go reads its own variables with a Reader:
//
//	r := envconf.New(get)
//	cfg.Capacity = r.IntMin("AGENTMESH_CAPACITY", 1)
//	cfg.WallTime = r.Duration("AGENTMESH_WALL_TIME")
//	return cfg, r.Err()
//
// get answers a variable's effective value (the command's flag, else the
// environment, else the default its declaration gives); the declarations
// themselves, with their docs, stay in one table (services/app.EnvVars).
// An empty value reads as the type's zero value: the service applies its
// default.
package envconf

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Getter answers the effective value of a variable ("" when unset).
type Getter func(name string) string

// Error is a bad value of one variable.
type Error struct {
	Name   string // the variable, e.g. AGENTMESH_CAPACITY
	Value  string // the value as given
	Reason string // what was wanted
}

func (e *Error) Error() string {
	if e.Value == "" {
		return e.Name + ": " + e.Reason
	}
	return fmt.Sprintf("%s: %s, got %q", e.Name, e.Reason, e.Value)
}

// Map returns a Getter over a fixed map (tests, and settings built in code).
func Map(m map[string]string) Getter { return func(name string) string { return m[name] } }

// Reader reads typed values and keeps the first error.
type Reader struct {
	get Getter
	err error
}

// New returns a Reader over get (nil reads every variable as unset).
func New(get Getter) *Reader {
	if get == nil {
		get = func(string) string { return "" }
	}
	return &Reader{get: get}
}

// Err is the first bad value read, or nil.
func (r *Reader) Err() error { return r.err }

// Fail records that name's value is bad for reason (a check the getters do
// not make, e.g. one setting against another). Only the first error is kept.
func (r *Reader) Fail(name, reason string) {
	if r.err == nil {
		r.err = &Error{Name: name, Value: r.String(name), Reason: reason}
	}
}

// Failf is Fail with a formatted reason.
func (r *Reader) Failf(name, format string, args ...any) { r.Fail(name, fmt.Sprintf(format, args...)) }

// String is name's value, trimmed.
func (r *Reader) String(name string) string { return strings.TrimSpace(r.get(name)) }

// Parse hands a set value to parse and records its error under name; it
// returns false when the value is unset or bad.
func (r *Reader) Parse(name string, parse func(v string) error) bool {
	v := r.String(name)
	if v == "" {
		return false
	}
	if err := parse(v); err != nil {
		if r.err == nil {
			r.err = &Error{Name: name, Value: v, Reason: err.Error()}
		}
		return false
	}
	return true
}

// Int is name's value as an integer (0 when unset).
func (r *Reader) Int(name string) int {
	var n int
	r.Parse(name, func(v string) (err error) {
		if n, err = strconv.Atoi(v); err != nil {
			return errors.New("want a whole number")
		}
		return nil
	})
	return n
}

// IntRange is Int, refused outside [lo, hi] when set.
func (r *Reader) IntRange(name string, lo, hi int) int {
	n := r.Int(name)
	if r.String(name) != "" && (n < lo || n > hi) {
		r.Failf(name, "want a whole number from %d to %d", lo, hi)
	}
	return n
}

// Float is name's value as a finite number (0 when unset).
func (r *Reader) Float(name string) float64 {
	var f float64
	r.Parse(name, func(v string) (err error) {
		f, err = strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return errors.New("want a number")
		}
		return nil
	})
	return f
}

// Bool is name's value as true or false (false when unset).
func (r *Reader) Bool(name string) bool {
	var b bool
	r.Parse(name, func(v string) (err error) {
		if b, err = strconv.ParseBool(v); err != nil {
			return errors.New("want true or false")
		}
		return nil
	})
	return b
}

// Duration is name's value as a Go duration such as 30s or 1h30m (0 when
// unset).
func (r *Reader) Duration(name string) time.Duration {
	var d time.Duration
	r.Parse(name, func(v string) (err error) {
		if d, err = time.ParseDuration(v); err != nil {
			return errors.New("want a duration such as 30s, 5m or 1h")
		}
		return nil
	})
	return d
}

// Bytes is name's value as a size (ParseBytes; 0 when unset).
func (r *Reader) Bytes(name string) int64 {
	var n int64
	r.Parse(name, func(v string) (err error) {
		n, err = ParseBytes(v)
		return err
	})
	return n
}

// Enum is name's value, which must be one of allowed when set.
func (r *Reader) Enum(name string, allowed ...string) string {
	v := r.String(name)
	if v == "" {
		return ""
	}
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	r.Failf(name, "want one of %s", strings.Join(allowed, ", "))
	return v
}

// List is name's comma-separated value, each item trimmed, empty items
// dropped (nil when unset).
func (r *Reader) List(name string) []string {
	var out []string
	for _, item := range strings.Split(r.String(name), ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// Pairs is name's "key=value,key2=value2" value (ParsePairs; an empty map
// when unset).
func (r *Reader) Pairs(name string) map[string]string {
	out := map[string]string{}
	r.Parse(name, func(v string) (err error) {
		out, err = ParsePairs(v)
		return err
	})
	return out
}

// ParsePairs reads "key=value,key2=value2": items and their halves trimmed,
// empty items dropped; a key may not be empty or repeated.
func ParsePairs(v string) (map[string]string, error) {
	out := map[string]string{}
	for _, item := range strings.Split(v, ",") {
		if item = strings.TrimSpace(item); item == "" {
			continue
		}
		k, val, ok := strings.Cut(item, "=")
		k = strings.TrimSpace(k)
		if !ok || k == "" {
			return out, fmt.Errorf("%q is not key=value", item)
		}
		if _, dup := out[k]; dup {
			return out, fmt.Errorf("%q is given twice", k)
		}
		out[k] = strings.TrimSpace(val)
	}
	return out, nil
}

// ParseBytes reads a size: a whole number of bytes with an optional unit,
// K/KB/KiB, M/MB/MiB or G/GB/GiB (all powers of 1024), or B.
func ParseBytes(v string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(v))
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("want a number of bytes with an optional K, M or G (e.g. 16MiB)")
	}
	return n * mult, nil
}
