package cronspec

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseRefusesNamingFieldAndPosition(t *testing.T) {
	tests := []struct {
		name, expr, tz string
		field          string
		pos            int
		cronField      string
		reason         string
	}{
		{"empty", "", "", "cron", 0, "", "required"},
		{"four fields", "0 9 * *", "", "cron", 0, "", "4 fields"},
		{"six fields", "0 0 9 * * *", "", "cron", 0, "", "6 fields"},
		{"hour out of range", "0 25 * * *", "", "cron", 3, "hour", `"25"`},
		{"minute word", "x 9 * * *", "", "cron", 1, "minute", `"x"`},
		{"month zero", "0 9 1 0 *", "", "cron", 7, "month", `"0"`},
		{"day of week range", "0 9 * * 1-9", "", "cron", 9, "day-of-week", `"1-9"`},
		{"tabs and spaces", "0\t9  *  * mon-xyz", "", "cron", 11, "day-of-week", `"mon-xyz"`},
		{"unknown descriptor", "@fortnightly", "", "cron", 1, "", "unknown descriptor"},
		{"every without duration", "@every", "", "cron", 1, "", "needs a duration"},
		{"every bad duration", "@every 5 minutes", "", "cron", 8, "", "not a duration"},
		{"every too short", "@every 500ms", "", "cron", 8, "", "shorter"},
		{"every fraction", "@every 1500ms", "", "cron", 8, "", "whole number"},
		{"tz prefix", "CRON_TZ=UTC 0 9 * * *", "", "cron", 1, "", "time_zone"},
		{"bad zone", "0 9 * * *", "Mars/Olympus", "time_zone", 0, "", "IANA"},
		{"local zone", "0 9 * * *", "Local", "time_zone", 0, "", "depends on the server"},
		{"too long", strings.Repeat("1,", 200) + "1 * * * *", "", "cron", 0, "", "longer than"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.expr, tc.tz)
			var e *Error
			if !errors.As(err, &e) || !errors.Is(err, ErrSpec) {
				t.Fatalf("Parse(%q, %q) = %v, want an *Error", tc.expr, tc.tz, err)
			}
			if e.Field != tc.field || e.Position != tc.pos || e.CronField != tc.cronField || !strings.Contains(e.Reason, tc.reason) {
				t.Errorf("got field %q position %d cron field %q reason %q, want %q %d %q containing %q",
					e.Field, e.Position, e.CronField, e.Reason, tc.field, tc.pos, tc.cronField, tc.reason)
			}
		})
	}
}

func TestNext(t *testing.T) {
	paris, _ := time.LoadLocation("Europe/Paris")
	tests := []struct {
		name, expr, tz string
		after          time.Time
		want           []time.Time
	}{
		{"every minute", "* * * * *", "", time.Date(2026, 3, 1, 10, 0, 30, 0, time.UTC),
			[]time.Time{time.Date(2026, 3, 1, 10, 1, 0, 0, time.UTC), time.Date(2026, 3, 1, 10, 2, 0, 0, time.UTC)}},
		{"on a slot: the next one", "*/15 * * * *", "", time.Date(2026, 3, 1, 10, 15, 0, 0, time.UTC),
			[]time.Time{time.Date(2026, 3, 1, 10, 30, 0, 0, time.UTC)}},
		{"daily in Paris across the spring change", "30 2 * * *", "Europe/Paris", time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC),
			// 02:30 does not exist on 29 March 2026 in Paris: that day has
			// no slot.
			[]time.Time{time.Date(2026, 3, 30, 2, 30, 0, 0, paris), time.Date(2026, 3, 31, 2, 30, 0, 0, paris)}},
		{"daily in Paris across the autumn change", "30 2 * * *", "Europe/Paris", time.Date(2026, 10, 24, 12, 0, 0, 0, time.UTC),
			// 02:30 happens twice on 25 October 2026 in Paris: two slots.
			[]time.Time{time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC), time.Date(2026, 10, 25, 1, 30, 0, 0, time.UTC), time.Date(2026, 10, 26, 1, 30, 0, 0, time.UTC)}},
		{"@daily is midnight in the zone", "@daily", "America/New_York", time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC),
			[]time.Time{time.Date(2026, 6, 2, 4, 0, 0, 0, time.UTC)}},
		{"@every aligned on the epoch", "@every 1h", "", time.Date(2026, 3, 1, 10, 20, 0, 0, time.UTC),
			[]time.Time{time.Date(2026, 3, 1, 11, 0, 0, 0, time.UTC), time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}},
		{"@every 90s", "@every 90s", "", time.Unix(1000, 0),
			[]time.Time{time.Unix(1080, 0), time.Unix(1170, 0)}},
		{"never (30 February)", "0 0 30 2 *", "", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), []time.Time{{}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse(tc.expr, tc.tz)
			if err != nil {
				t.Fatal(err)
			}
			at := tc.after
			for i, want := range tc.want {
				got := s.Next(at)
				if !got.Equal(want) {
					t.Fatalf("slot %d after %s: got %s, want %s", i, at, got, want)
				}
				at = got
			}
		})
	}
}

func TestJitter(t *testing.T) {
	slot := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	if Jitter("sch_1", slot, 0) != 0 {
		t.Error("no jitter asked, got some")
	}
	a, b := Jitter("sch_1", slot, time.Minute), Jitter("sch_1", slot, time.Minute)
	if a != b || a < 0 || a >= time.Minute {
		t.Errorf("jitter %s then %s: want the same, in [0, 1m)", a, b)
	}
	seen := map[time.Duration]bool{}
	for i := range 50 {
		seen[Jitter("sch_1", slot.Add(time.Duration(i)*time.Minute), time.Minute)] = true
	}
	if len(seen) < 40 {
		t.Errorf("50 slots got %d distinct jitters: not spread", len(seen))
	}
}

// FuzzParse: no expression or zone makes Parse panic, and whatever parses
// gives slots that move forward.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"* * * * *", "0 9 * * mon-fri", "@every 1h", "@daily", "0 25 * * *", "TZ=", "@every", "*/0 * * * *", "0-70 * * * *", "? ? ? ? ?", "1-2/0 * * * *"} {
		f.Add(s, "")
	}
	f.Add("0 9 * * *", "Europe/Paris")
	f.Fuzz(func(t *testing.T, expr, tz string) {
		s, err := Parse(expr, tz)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("Parse(%q, %q): error %v is not an *Error", expr, tz, err)
			}
			return
		}
		at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		for range 3 {
			next := s.Next(at)
			if next.IsZero() {
				return
			}
			if !next.After(at) {
				t.Fatalf("Parse(%q, %q): slot %s is not after %s", expr, tz, next, at)
			}
			at = next
		}
	})
}
