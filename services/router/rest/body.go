package rest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The checks of a request body before the gateway decodes it.

// unsupportedBody is the reason a body's headers make it one the API does
// not read (answered 415), nil when it may be JSON. The API reads JSON
// only, unencoded: Content-Encoding must be absent or identity, and
// Content-Type absent, application/json, application/*+json, or — what
// curl -d and a browser's fetch of a string send by default —
// application/x-www-form-urlencoded and text/plain; a charset other than
// UTF-8 is refused (JSON is UTF-8).
func unsupportedBody(h http.Header) *status.Status {
	for _, v := range h.Values("Content-Encoding") {
		for _, enc := range strings.Split(v, ",") {
			if enc = strings.TrimSpace(enc); enc != "" && !strings.EqualFold(enc, "identity") {
				return fieldStatus("Content-Encoding", "Content-Encoding %q is not supported: send the JSON body unencoded", enc)
			}
		}
	}
	ct := h.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err != nil {
		return fieldStatus("Content-Type", "Content-Type %q does not parse (%v): send application/json", ct, err)
	}
	switch {
	case mt == "application/json", strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"),
		mt == "application/x-www-form-urlencoded", mt == "text/plain":
	default:
		return fieldStatus("Content-Type", "Content-Type %q is not supported: the API reads JSON (application/json)", mt)
	}
	if cs, ok := params["charset"]; ok && !strings.EqualFold(cs, "utf-8") && !strings.EqualFold(cs, "us-ascii") {
		return fieldStatus("Content-Type", "charset %q is not supported: JSON is UTF-8", cs)
	}
	return nil
}

// fieldStatus is an InvalidArgument status naming field.
func fieldStatus(field, format string, args ...any) *status.Status {
	return withField(status.Newf(codes.InvalidArgument, format, args...), field)
}

// checkJSON refuses a body that is not JSON the gateway can decode,
// saying where it breaks: not UTF-8, not JSON, or a string escaping half
// of a UTF-16 surrogate pair (which JSON's grammar allows but no string
// can hold; the gateway's decoder would say only "unexpected EOF").
func checkJSON(body []byte) error {
	if !utf8.Valid(body) {
		return fieldError("body", "request body is not valid JSON: it is not UTF-8 (at byte %d)", invalidUTF8At(body))
	}
	if !json.Valid(body) {
		return fieldError("body", "request body is not valid JSON: %s", jsonSyntax(body))
	}
	if at := loneSurrogate(body); at >= 0 {
		return fieldError("body", "request body is not valid JSON: the escape %s at byte %d is half of a UTF-16 surrogate pair", body[at:at+6], at)
	}
	return nil
}

// invalidUTF8At is the offset of the first byte of b that is not UTF-8.
func invalidUTF8At(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(b)
}

// jsonSyntax says where and why body is not JSON.
func jsonSyntax(body []byte) string {
	var v any
	err := json.Unmarshal(body, &v)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%v (at byte %d)", se, se.Offset)
	}
	if err == nil {
		return "unexpected data after the value"
	}
	return err.Error()
}

// loneSurrogate returns the offset of the first \u escape in a string of
// body that is a UTF-16 surrogate without its other half, -1 when there
// is none. body is valid JSON (so every escape is complete).
func loneSurrogate(body []byte) int {
	in := false
	for i := 0; i < len(body); i++ {
		switch c := body[i]; {
		case !in:
			in = c == '"'
		case c == '"':
			in = false
		case c != '\\':
		case body[i+1] != 'u':
			i++ // a one-letter escape
		default:
			v := hex4(body[i+2 : i+6])
			switch {
			case v >= 0xD800 && v <= 0xDBFF && lowSurrogateAt(body, i+6):
				i += 11
			case v >= 0xD800 && v <= 0xDFFF:
				return i
			default:
				i += 5
			}
		}
	}
	return -1
}

// lowSurrogateAt reports whether body holds a \uDC00-\uDFFF escape at i.
func lowSurrogateAt(body []byte, i int) bool {
	if i+6 > len(body) || body[i] != '\\' || body[i+1] != 'u' {
		return false
	}
	v := hex4(body[i+2 : i+6])
	return v >= 0xDC00 && v <= 0xDFFF
}

// hex4 reads four hex digits (-1 if they are not).
func hex4(b []byte) int {
	v := 0
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | int(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | int(c-'a'+10)
		case c >= 'A' && c <= 'F':
			v = v<<4 | int(c-'A'+10)
		default:
			return -1
		}
	}
	return v
}

// bodyKey holds a request's body in its context, for the error handler
// to name the field a decoding error points at.
type bodyKey struct{}

// protoPosRe is the position protojson gives an error: (line L:C), C
// counted in runes from 1.
var protoPosRe = regexp.MustCompile(`\(line (\d+):(\d+)\)`)

// fieldAtError is the JSON path ("budget.max_wall_time", "metadata.a",
// "tags[2]") of the key or value in body that a protojson error message
// points at; "" when it names no position or the body does not lead there.
func fieldAtError(body []byte, msg string) string {
	m := protoPosRe.FindStringSubmatch(msg)
	if m == nil {
		return ""
	}
	line, _ := strconv.Atoi(m[1])
	col, _ := strconv.Atoi(m[2])
	// protojson reads the value the gateway's decoder cut out: the body
	// without the white space before it.
	body = bytes.TrimLeft(body, " \t\r\n")
	off := offsetOf(body, line, col)
	if off < 0 {
		return ""
	}
	return jsonPathAt(body, off)
}

// offsetOf is the byte offset of line and column (runes, both from 1) in
// b, -1 when b has no such place.
func offsetOf(b []byte, line, col int) int {
	off := 0
	for ; line > 1; line-- {
		i := bytes.IndexByte(b[off:], '\n')
		if i < 0 {
			return -1
		}
		off += i + 1
	}
	for ; col > 1; col-- {
		if off >= len(b) {
			return -1
		}
		_, n := utf8.DecodeRune(b[off:])
		off += n
	}
	return off
}

// pathFrame is one open object (key: its current key) or array (index:
// its current element) on the way to a token.
type pathFrame struct {
	object  bool
	key     string
	index   int
	wantKey bool
}

// jsonPathAt is the path of the token of body that ends past off (a key
// names its own path), "" when no token does.
func jsonPathAt(body []byte, off int) string {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var stack []pathFrame
	for {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		top := len(stack) - 1
		isKey := top >= 0 && stack[top].object && stack[top].wantKey
		if isKey {
			if k, ok := tok.(string); ok {
				stack[top].key, stack[top].wantKey = k, false
			}
		}
		if dec.InputOffset() > int64(off) {
			return framePath(stack)
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, pathFrame{object: true, wantKey: true})
		case json.Delim('['):
			stack = append(stack, pathFrame{})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:top]
			valueDone(stack)
		default:
			if !isKey {
				valueDone(stack)
			}
		}
	}
}

// valueDone moves the innermost container past a value.
func valueDone(stack []pathFrame) {
	if top := len(stack) - 1; top >= 0 {
		if stack[top].object {
			stack[top].wantKey = true
		} else {
			stack[top].index++
		}
	}
}

// framePath spells a stack as a field path.
func framePath(stack []pathFrame) string {
	var b strings.Builder
	for _, f := range stack {
		if f.object {
			if f.wantKey {
				break // between keys: the object itself
			}
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(f.key)
			continue
		}
		fmt.Fprintf(&b, "[%d]", f.index)
	}
	return b.String()
}
