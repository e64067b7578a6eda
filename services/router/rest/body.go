package rest

import (
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
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
