package rest

import (
	_ "embed"
	"net/http"
)

// OpenAPI is the OpenAPI (Swagger 2.0) document of the REST API, generated
// from the proto by `make generate` (protoc-gen-openapiv2; buf.gen.yaml)
// and committed: `make generate-check` fails when it drifts from the proto.
//
//go:embed openapi/agentmesh.swagger.json
var OpenAPI []byte

// serveOpenAPI serves GET /v1/openapi.json (no key needed: it describes
// the API, it holds nothing of anyone's).
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(OpenAPI)
}
