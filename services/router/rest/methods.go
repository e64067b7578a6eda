package rest

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"
)

// The methods of the API's paths, for HTTP's method semantics: a 405
// names the methods the path takes (Allow), an OPTIONS request that is no
// CORS preflight is answered with them, and HEAD is served wherever GET
// is. The table is the OpenAPI document's paths (generated from the
// proto's google.api.http bindings, so it is every gateway route) and the
// routes this package serves itself.

// route is one path template of the API and the methods it takes.
type route struct {
	segments []string // a "{...}" segment matches any one segment
	methods  []string // upper case, sorted
}

// routes is the table, read once from OpenAPI.
var routes = mustRoutes(OpenAPI)

// ownRoutes are the paths this package serves beside the gateway's.
var ownRoutes = map[string][]string{"/v1/openapi.json": {"get"}}

// mustRoutes reads the route table from an OpenAPI (Swagger 2.0)
// document; a document that does not parse is a build defect (it is
// embedded), so it panics.
func mustRoutes(doc []byte) []route {
	var d struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		panic("rest: the embedded OpenAPI document does not parse: " + err.Error())
	}
	all := map[string][]string{}
	for p, ops := range d.Paths {
		for m := range ops {
			all[p] = append(all[p], m)
		}
	}
	for p, ms := range ownRoutes {
		all[p] = append(all[p], ms...)
	}
	var out []route
	for p, ms := range all {
		r := route{segments: strings.Split(strings.Trim(p, "/"), "/")}
		for _, m := range ms {
			switch m = strings.ToUpper(m); m {
			case http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
				r.methods = append(r.methods, m)
			}
		}
		if len(r.methods) > 0 {
			out = append(out, r)
		}
	}
	return out
}

// matches reports whether path's segments fit the template.
func (r route) matches(segments []string) bool {
	if len(segments) != len(r.segments) {
		return false
	}
	for i, s := range r.segments {
		if strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") {
			if segments[i] == "" {
				return false
			}
			continue
		}
		if s != segments[i] {
			return false
		}
	}
	return true
}

// allowedMethods returns the methods the API takes at path (its escaped
// form, so an escaped "/" stays inside its segment), with HEAD beside GET
// and OPTIONS; none when no route has the path.
func allowedMethods(path string) []string {
	segments := strings.Split(strings.Trim(path, "/"), "/")
	set := map[string]bool{}
	for _, r := range routes {
		if r.matches(segments) {
			for _, m := range r.methods {
				set[m] = true
			}
		}
	}
	if len(set) == 0 {
		return nil
	}
	if set[http.MethodGet] {
		set[http.MethodHead] = true
	}
	set[http.MethodOptions] = true
	out := make([]string, 0, len(set))
	for m := range set {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}
