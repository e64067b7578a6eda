// Package cronspec reads when a schedule fires — a standard cron expression
// (five fields, or a descriptor such as @daily or @every 90m) in an IANA
// time zone — and answers its slots. The router checks a schedule with it,
// the state service and the scheduler compute its slots with it, so all
// three read an expression the same way. Parsing is github.com/robfig/cron/v3
// (its standard five-field parser); what it adds is an error that names the
// field and the position of what is wrong, @every slots aligned on the Unix
// epoch (the same slots whatever fires them), and a jitter that is the same
// for a slot wherever it is computed.
package cronspec

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"
	// The time zone database is embedded: a host without one still reads
	// every IANA zone.
	_ "time/tzdata"

	"github.com/robfig/cron/v3"
)

// Bounds of what a schedule may ask for.
const (
	// MinEvery is the shortest @every interval.
	MinEvery = time.Second
	// MaxExprLen bounds an expression's length.
	MaxExprLen = 256
)

// ErrSpec is wrapped by every *Error.
var ErrSpec = errors.New("invalid schedule")

// Error says what is wrong with an expression or a time zone: the field of
// the request (cron or time_zone), and for an expression the cron field
// (minute, hour, ...) and the position (1-based, in characters) of the part
// that is wrong.
type Error struct {
	// Field is "cron" or "time_zone".
	Field string
	// Position of the bad part in the expression (1-based; 0 = the whole).
	Position int
	// CronField names the cron field at Position ("hour"), if any.
	CronField string
	Reason    string
}

func (e *Error) Error() string {
	var b strings.Builder
	if e.CronField != "" {
		fmt.Fprintf(&b, "%s field ", e.CronField)
	}
	if e.Position > 0 {
		fmt.Fprintf(&b, "at position %d: ", e.Position)
	}
	b.WriteString(e.Reason)
	return b.String()
}

// Unwrap makes errors.Is(err, ErrSpec) hold.
func (e *Error) Unwrap() error { return ErrSpec }

// Spec is a parsed schedule timing. It is safe for concurrent use.
type Spec struct {
	expr  string
	loc   *time.Location
	every time.Duration      // @every, else 0
	sched *cron.SpecSchedule // otherwise
}

// fieldNames are the five fields in order.
var fieldNames = []string{"minute", "hour", "day-of-month", "month", "day-of-week"}

var standard = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// Parse reads expr in time zone tz ("" = UTC). A bad expression or zone is
// an *Error.
func Parse(expr, tz string) (*Spec, error) {
	loc, err := location(tz)
	if err != nil {
		return nil, err
	}
	expr = strings.TrimSpace(expr)
	switch {
	case expr == "":
		return nil, &Error{Field: "cron", Reason: "a cron expression is required (five fields, or @hourly, @daily, @every 15m...)"}
	case len(expr) > MaxExprLen:
		return nil, &Error{Field: "cron", Reason: fmt.Sprintf("longer than %d characters", MaxExprLen)}
	case strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ="):
		return nil, &Error{Field: "cron", Position: 1, Reason: "a time zone prefix is not read here: give the zone as time_zone"}
	case strings.HasPrefix(expr, "@every"):
		return parseEvery(expr, loc)
	}
	sched, err := parseStandard(expr)
	if err != nil {
		return nil, err
	}
	sched.Location = loc
	return &Spec{expr: expr, loc: loc, sched: sched}, nil
}

func location(tz string) (*time.Location, error) {
	if tz == "" || tz == "UTC" {
		return time.UTC, nil
	}
	if strings.EqualFold(tz, "local") {
		return nil, &Error{Field: "time_zone", Reason: `"Local" depends on the server: name an IANA zone such as "Europe/Paris"`}
	}
	loc, err := time.LoadLocation(tz)
	if err != nil {
		return nil, &Error{Field: "time_zone", Reason: fmt.Sprintf("%q is not an IANA time zone (such as \"Europe/Paris\" or \"America/New_York\")", tz)}
	}
	return loc, nil
}

func parseEvery(expr string, loc *time.Location) (*Spec, error) {
	arg := strings.TrimSpace(strings.TrimPrefix(expr, "@every"))
	pos := strings.Index(expr, arg) + 1
	if arg == "" || !strings.HasPrefix(expr, "@every ") {
		return nil, &Error{Field: "cron", Position: 1, Reason: "@every needs a duration, such as @every 15m"}
	}
	d, err := time.ParseDuration(arg)
	switch {
	case err != nil:
		return nil, &Error{Field: "cron", Position: pos, Reason: fmt.Sprintf("%q is not a duration (such as 90s, 15m, 2h)", arg)}
	case d < MinEvery:
		return nil, &Error{Field: "cron", Position: pos, Reason: fmt.Sprintf("%s is shorter than %s", d, MinEvery)}
	case d%time.Second != 0:
		return nil, &Error{Field: "cron", Position: pos, Reason: fmt.Sprintf("%s is not a whole number of seconds", d)}
	}
	return &Spec{expr: expr, loc: loc, every: d}, nil
}

// parseStandard parses a five-field expression or a descriptor; on an
// error it finds the first field that does not parse on its own and names
// it and its position.
func parseStandard(expr string) (sched *cron.SpecSchedule, err error) {
	defer func() {
		if p := recover(); p != nil { // the parser must not take a service down
			sched, err = nil, &Error{Field: "cron", Reason: fmt.Sprintf("does not parse (%v)", p)}
		}
	}()
	s, perr := standard.Parse(expr)
	if perr == nil {
		spec, ok := s.(*cron.SpecSchedule)
		if !ok { // descriptors parse to SpecSchedule too; @every is handled apart
			return nil, &Error{Field: "cron", Position: 1, Reason: "unsupported expression"}
		}
		return spec, nil
	}
	if strings.HasPrefix(expr, "@") {
		return nil, &Error{Field: "cron", Position: 1, Reason: fmt.Sprintf("unknown descriptor %q (want @yearly, @annually, @monthly, @weekly, @daily, @midnight, @hourly or @every <duration>)", strings.Fields(expr)[0])}
	}
	fields, starts := splitFields(expr)
	if len(fields) != 5 {
		return nil, &Error{Field: "cron", Reason: fmt.Sprintf("%d fields; want 5 (minute hour day-of-month month day-of-week) or a descriptor such as @daily", len(fields))}
	}
	for i, f := range fields {
		probe := []string{"*", "*", "*", "*", "*"}
		probe[i] = f
		if _, ferr := standard.Parse(strings.Join(probe, " ")); ferr != nil {
			return nil, &Error{Field: "cron", Position: starts[i] + 1, CronField: fieldNames[i], Reason: fmt.Sprintf("%q: %v", f, ferr)}
		}
	}
	return nil, &Error{Field: "cron", Reason: perr.Error()}
}

// splitFields splits expr on spaces and tabs and returns each field's
// 0-based start.
func splitFields(expr string) (fields []string, starts []int) {
	start := -1
	for i, r := range expr + " " {
		if r == ' ' || r == '\t' {
			if start >= 0 {
				fields, starts = append(fields, expr[start:i]), append(starts, start)
				start = -1
			}
			continue
		}
		if start < 0 {
			start = i
		}
	}
	return fields, starts
}

// Expr returns the expression as parsed.
func (s *Spec) Expr() string { return s.expr }

// Location returns the time zone the expression is read in.
func (s *Spec) Location() *time.Location { return s.loc }

// Next returns the first slot strictly after t, or the zero time when there
// is none within five years. A wall time the zone skips (the spring change
// of daylight saving time) has no slot that day; one it repeats (the
// autumn change) has two, an hour apart.
func (s *Spec) Next(t time.Time) time.Time {
	if s.every > 0 {
		n := t.Unix() / int64(s.every/time.Second)
		return time.Unix((n+1)*int64(s.every/time.Second), 0).In(s.loc)
	}
	return s.sched.Next(t.In(s.loc))
}

// Jitter returns the delay in [0, max) of a slot of the schedule id: a
// hash of both, so every replica computes the same one.
func Jitter(id string, slot time.Time, max time.Duration) time.Duration {
	if max <= 0 {
		return 0
	}
	h := sha256.New()
	h.Write([]byte(id))
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(slot.Unix()))
	h.Write(b[:])
	v := binary.BigEndian.Uint64(h.Sum(nil)[:8])
	return time.Duration(v % uint64(max))
}
