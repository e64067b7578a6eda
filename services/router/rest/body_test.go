package rest

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
)

// The body checks before the gateway decodes: an encoded body or one of
// another media type is 415 naming the header; a body that no proto
// string can hold (not UTF-8, half a surrogate pair) is 400 naming the
// body and saying where; a field given twice is named.
func TestBodyChecks(t *testing.T) {
	ts := serveStub(t, &stub{}, time.Minute)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(`{"input": "x"}`))
	_ = zw.Close()
	for _, tc := range []struct {
		name, body string
		hdr        map[string]string
		code       int
		field      string
		words      string
	}{
		{"gzip", gz.String(), map[string]string{"Content-Encoding": "gzip"}, 415, "Content-Encoding", `"gzip" is not supported`},
		{"xml", `{"input": "x"}`, map[string]string{"Content-Type": "application/xml"}, 415, "Content-Type", `"application/xml" is not supported`},
		{"multipart", `{"input": "x"}`, map[string]string{"Content-Type": "multipart/form-data; boundary=x"}, 415, "Content-Type", "not supported"},
		{"utf-16", `{"input": "x"}`, map[string]string{"Content-Type": "application/json; charset=utf-16"}, 415, "Content-Type", `charset "utf-16"`},
		{"bad media type", `{"input": "x"}`, map[string]string{"Content-Type": "application/json; ="}, 415, "Content-Type", "does not parse"},
		{"lone surrogate", `{"input": "a\ud800b"}`, nil, 400, "body", `\ud800 at byte 12 is half of a UTF-16 surrogate pair`},
		{"low surrogate alone", `{"input": "\udc00"}`, nil, 400, "body", "surrogate"},
		{"not UTF-8", "{\"input\": \"\xff\"}", nil, 400, "body", "not UTF-8 (at byte 11)"},
		{"duplicate field", `{"input": "x", "input": "y"}`, nil, 400, "input", `duplicate field "input"`},
		{"json", `{"input": "x"}`, map[string]string{"Content-Type": "application/json; charset=UTF-8"}, 200, "", ""},
		{"curl's default", `{"input": "x"}`, map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, 200, "", ""},
		{"fetch's default", `{"input": "x"}`, map[string]string{"Content-Type": "text/plain;charset=UTF-8"}, 200, "", ""},
		{"+json", `{"input": "x"}`, map[string]string{"Content-Type": "application/merge-patch+json"}, 200, "", ""},
		{"identity", `{"input": "x"}`, map[string]string{"Content-Encoding": "identity"}, 200, "", ""},
		{"surrogate pair", `{"input": "\ud83d\ude00 \\u"}`, nil, 200, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := send(t, "POST", ts.URL+"/v1/tasks", strings.NewReader(tc.body), tc.hdr)
			if r.Code != tc.code {
				t.Fatalf("HTTP %d %s, want %d", r.Code, r.Body, tc.code)
			}
			if tc.code == 200 {
				return
			}
			st := r.Status()
			if st == nil || st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tc.words) || fieldOf(st) != tc.field {
				t.Fatalf("body %s, want InvalidArgument saying %q naming %s", r.Body, tc.words, tc.field)
			}
			if tc.code == 415 && r.Header.Get("Accept-Encoding") != "identity" {
				t.Errorf("Accept-Encoding %q, want identity", r.Header.Get("Accept-Encoding"))
			}
		})
	}
}

// Whatever a body holds, a body checkJSON passes is one protojson decodes
// without the "unexpected EOF" that names nothing.
func FuzzCheckJSON(f *testing.F) {
	for _, s := range []string{`{"a":"\ud800"}`, `{"a":"\ud83d\ude00"}`, `["\\u", "\udc00x"]`, `"\u00e9"`, "\"\xff\"", `{"a":1}`, `"\\\ud800"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if checkJSON(body) != nil {
			return
		}
		var v structpb.Value
		if err := protojson.Unmarshal(body, &v); err != nil && strings.Contains(err.Error(), "unexpected EOF") {
			t.Fatalf("checkJSON passed %q, which protojson cannot read: %v", body, err)
		}
	})
}

// A body that does not decode names the field by its path in the body,
// where protojson says the error is.
func TestBodyFieldPath(t *testing.T) {
	ts := serveStub(t, &stub{}, time.Minute)
	for body, want := range map[string]string{
		`{"input": "x", "metadata": {"a": 1}}`:           "metadata.a",
		"\n  {\"input\": \"x\",\n \"tags\": [\"a\", 2]}": "tags[1]",
		`{"input": "x", "budget": {"max_wall_time": 5}}`: "budget.max_wall_time",
		`{"input": 5}`:                         "input",
		`{"inptu": "x"}`:                       "inptu",
		`{"input": "x", "priority": "URGENT"}`: "priority",
		`[]`:                                   "body",
		`null`:                                 "body",
	} {
		r := send(t, "POST", ts.URL+"/v1/tasks", strings.NewReader(body), nil)
		if st := r.Status(); r.Code != 400 || st == nil || fieldOf(st) != want {
			t.Errorf("%s: HTTP %d %s, want 400 naming %s", body, r.Code, r.Body, want)
		}
	}
}

// FuzzJSONPathAt: whatever the body and the place, finding the path there
// ends without a panic, and no path is found past the body's end.
func FuzzJSONPathAt(f *testing.F) {
	f.Add([]byte(`{"a": {"b": [1, {"c": 2}]}}`), 20)
	f.Add([]byte(`[[[`), 2)
	f.Add([]byte(`{"a":`), 4)
	f.Fuzz(func(t *testing.T, body []byte, off int) {
		if p := jsonPathAt(body, off); p != "" && off >= len(body) {
			t.Fatalf("path %q at %d, past the end of %q", p, off, body)
		}
		_ = fieldAtError(body, fmt.Sprintf("proto: (line %d:%d): x", off%7, off))
	})
}
