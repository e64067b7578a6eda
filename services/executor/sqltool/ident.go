package sqltool

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// How Postgres turns identifier tokens into names (scan.l, parser.c,
// scansup.c), which the classifier must do the same way, or a name it
// does not recognise could still call a function it refuses:
//
//   - an unquoted identifier is folded to lower case — ASCII letters only
//     (downcase_identifier leaves other bytes alone in a UTF-8 database);
//   - a quoted identifier keeps its case, a doubled quote stands for one;
//   - U&"…" decodes Unicode escapes: \XXXX and \+XXXXXX (hex), \\ for the
//     escape character itself, surrogate pairs joined; UESCAPE 'c' after
//     the token names another escape character;
//   - every name is cut to NAMEDATALEN-1 = 63 bytes (on a character
//     boundary).

// maxIdentLen is NAMEDATALEN-1.
const maxIdentLen = 63

// errBadEscape is returned for a Unicode escape Postgres would reject.
var errBadEscape = errors.New("invalid Unicode escape")

// foldASCII lower-cases A-Z only.
func foldASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if b[j] >= 'A' && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

// upperASCII upper-cases a-z only (keywords are ASCII).
func upperASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'z' {
			b[i] = c - ('a' - 'A')
		}
	}
	return string(b)
}

// truncateIdent cuts a name to 63 bytes without splitting a character.
func truncateIdent(s string) string {
	if len(s) <= maxIdentLen {
		return s
	}
	n := maxIdentLen
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// ident returns the name an identifier token denotes, as Postgres would
// look it up: "" for a token that is not an identifier.
func (t token) ident() (string, error) {
	switch t.kind {
	case tokWord:
		return truncateIdent(foldASCII(t.text)), nil
	case tokQIdent:
		s := t.text
		uni := strings.HasPrefix(s, "U&") || strings.HasPrefix(s, "u&")
		if uni {
			s = s[2:]
		}
		s = strings.TrimPrefix(s, `"`)
		if !t.unterminated {
			s = strings.TrimSuffix(s, `"`)
		}
		s = strings.ReplaceAll(s, `""`, `"`)
		if uni {
			esc := t.esc
			if esc == 0 {
				esc = '\\'
			}
			d, err := decodeUnicodeEscapes(s, esc)
			if err != nil {
				return "", err
			}
			s = d
		}
		if s == "" {
			return "", errors.New("zero-length delimited identifier")
		}
		return truncateIdent(s), nil
	}
	return "", nil
}

// decodeUnicodeEscapes decodes the body of a U&"…" identifier or U&'…'
// string with escape character esc.
func decodeUnicodeEscapes(s string, esc rune) (string, error) {
	var b strings.Builder
	var pendingHigh rune // a high surrogate waiting for its pair
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r != esc {
			if pendingHigh != 0 {
				return "", fmt.Errorf("%w: a lone surrogate", errBadEscape)
			}
			b.WriteString(s[i : i+size])
			i += size
			continue
		}
		i += size
		var hex string
		switch {
		case strings.HasPrefix(s[i:], string(esc)):
			if pendingHigh != 0 {
				return "", fmt.Errorf("%w: a lone surrogate", errBadEscape)
			}
			b.WriteRune(esc)
			i += utf8.RuneLen(esc)
			continue
		case strings.HasPrefix(s[i:], "+"):
			if len(s) < i+7 {
				return "", fmt.Errorf("%w: \\+ needs six hex digits", errBadEscape)
			}
			hex, i = s[i+1:i+7], i+7
		default:
			if len(s) < i+4 {
				return "", fmt.Errorf("%w: needs four hex digits", errBadEscape)
			}
			hex, i = s[i:i+4], i+4
		}
		v, err := strconv.ParseUint(hex, 16, 32)
		if err != nil || strings.ContainsAny(hex, "+-xX_ ") {
			return "", fmt.Errorf("%w: %q is not hexadecimal", errBadEscape, hex)
		}
		c := rune(v)
		switch {
		case c >= 0xD800 && c <= 0xDBFF:
			if pendingHigh != 0 {
				return "", fmt.Errorf("%w: a lone surrogate", errBadEscape)
			}
			pendingHigh = c
			continue
		case c >= 0xDC00 && c <= 0xDFFF:
			if pendingHigh == 0 {
				return "", fmt.Errorf("%w: a lone surrogate", errBadEscape)
			}
			c = 0x10000 + (pendingHigh-0xD800)<<10 + (c - 0xDC00)
			pendingHigh = 0
		case pendingHigh != 0:
			return "", fmt.Errorf("%w: a lone surrogate", errBadEscape)
		}
		if c == 0 || c > utf8.MaxRune {
			return "", fmt.Errorf("%w: code point %X", errBadEscape, c)
		}
		b.WriteRune(c)
	}
	if pendingHigh != 0 {
		return "", fmt.Errorf("%w: a lone surrogate", errBadEscape)
	}
	return b.String(), nil
}

// stringValue returns the value of a string constant token as Postgres
// reads it with standard_conforming_strings on: '…' (doubled quotes), E'…'
// (backslash escapes), $tag$…$tag$. ok is false for forms it does not
// decode (B”, X”, U&” and E” with escapes other than the simple ones).
func stringValue(t token) (string, bool) {
	if t.kind == tokDollar {
		s := t.text
		j := strings.IndexByte(s[1:], '$') + 2
		if j < 2 || len(s) < 2*j {
			return "", false
		}
		return s[j : len(s)-j], true
	}
	if t.kind != tokString || t.unterminated {
		return "", false
	}
	s := t.text
	switch {
	case strings.HasPrefix(s, "'"):
		return strings.ReplaceAll(s[1:len(s)-1], "''", "'"), true
	case strings.HasPrefix(s, "E'") || strings.HasPrefix(s, "e'"):
		body := s[2 : len(s)-1]
		var b strings.Builder
		for i := 0; i < len(body); i++ {
			c := body[i]
			switch {
			case c == '\'' && i+1 < len(body) && body[i+1] == '\'':
				b.WriteByte('\'')
				i++
			case c == '\\' && i+1 < len(body):
				i++
				switch body[i] {
				case '\\', '\'', '"':
					b.WriteByte(body[i])
				case 'n':
					b.WriteByte('\n')
				case 't':
					b.WriteByte('\t')
				case 'r':
					b.WriteByte('\r')
				case 'b':
					b.WriteByte('\b')
				case 'f':
					b.WriteByte('\f')
				default:
					if body[i] >= '0' && body[i] <= '9' || body[i] == 'x' || body[i] == 'u' || body[i] == 'U' {
						return "", false
					}
					b.WriteByte(body[i])
				}
			default:
				b.WriteByte(c)
			}
		}
		return b.String(), true
	case strings.HasPrefix(s, "N'") || strings.HasPrefix(s, "n'"):
		return strings.ReplaceAll(s[2:len(s)-1], "''", "'"), true
	}
	return "", false
}

// applyUescape attaches each UESCAPE clause to the U& token before it and
// drops the clause's tokens (UESCAPE and its string). ts are significant
// tokens. A clause Postgres would reject, or one this package cannot
// read, is an error.
func applyUescape(ts []token) ([]token, error) {
	out := ts[:0:0]
	for i := 0; i < len(ts); i++ {
		t := ts[i]
		uni := (t.kind == tokQIdent || t.kind == tokString) && (strings.HasPrefix(t.text, "U&") || strings.HasPrefix(t.text, "u&"))
		if uni && i+1 < len(ts) && ts[i+1].kind == tokWord && upperASCII(ts[i+1].text) == "UESCAPE" {
			if i+2 >= len(ts) {
				return nil, errors.New("UESCAPE must be followed by a simple string literal")
			}
			v, ok := stringValue(ts[i+2])
			if !ok {
				return nil, errors.New("UESCAPE must be followed by a simple string literal this classifier can read")
			}
			r, size := utf8.DecodeRuneInString(v)
			if size == 0 || size != len(v) || strings.ContainsRune("0123456789abcdefABCDEF+'\" \t\n\r\f\v", r) {
				return nil, fmt.Errorf("invalid Unicode escape character %q", v)
			}
			t.esc = r
			i += 2
		}
		out = append(out, t)
	}
	return out, nil
}
