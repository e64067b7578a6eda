// Package otlptest is an OTLP trace receiver for tests and benchmarks: it
// listens on loopback for both OTLP transports — gRPC (the collector's
// TraceService) and HTTP (POST /v1/traces, protobuf, gzip or not) — and
// keeps every span it is sent (or only counts them), so a test can point
// agentmesh's exporter at it with the standard OTEL_EXPORTER_OTLP_*
// variables and look at the traces.
package otlptest

import (
	"compress/gzip"
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	collectorv1 "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonv1 "go.opentelemetry.io/proto/otlp/common/v1"
	tracev1 "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// Span is a received span, flattened.
type Span struct {
	Service  string // the resource's service.name
	Name     string
	Kind     tracev1.Span_SpanKind
	TraceID  string // hex
	SpanID   string
	ParentID string // "" for a root span
	// Links are the spans it links to, as "traceid/spanid".
	Links  []string
	Attrs  map[string]string // values as text (arrays joined with ",")
	Error  bool              // status ERROR
	Start  uint64            // unix nanoseconds
	End    uint64
	Source string // "grpc" or "http": the transport it came by
}

// Receiver holds the spans received so far.
type Receiver struct {
	GRPCAddr string // host:port of the gRPC receiver
	HTTPURL  string // base URL of the HTTP receiver (POST /v1/traces)

	collectorv1.UnimplementedTraceServiceServer
	countOnly bool
	count     atomic.Int64
	mu        sync.Mutex
	spans     []Span
	close     []func()
}

// Start starts both receivers on loopback, keeping every span, stopped
// when t ends.
func Start(t testing.TB) *Receiver {
	t.Helper()
	r, err := New(false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// New starts both receivers on loopback; countOnly keeps no span, only
// their number (Count). Close stops them.
func New(countOnly bool) (*Receiver, error) {
	r := &Receiver{countOnly: countOnly}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	gs := grpc.NewServer()
	collectorv1.RegisterTraceServiceServer(gs, r)
	go func() { _ = gs.Serve(gl) }()
	r.close = append(r.close, gs.Stop)
	r.GRPCAddr = gl.Addr().String()

	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		r.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", r.serveHTTP)
	hs := &http.Server{Handler: mux}
	go func() { _ = hs.Serve(hl) }()
	r.close = append(r.close, func() { _ = hs.Close() })
	r.HTTPURL = "http://" + hl.Addr().String()
	return r, nil
}

// Close stops the receivers.
func (r *Receiver) Close() {
	for _, c := range r.close {
		c()
	}
}

// Count is the number of spans received so far.
func (r *Receiver) Count() int64 { return r.count.Load() }

// Export receives spans over gRPC.
func (r *Receiver) Export(_ context.Context, req *collectorv1.ExportTraceServiceRequest) (*collectorv1.ExportTraceServiceResponse, error) {
	r.add(req, "grpc")
	return &collectorv1.ExportTraceServiceResponse{}, nil
}

// serveHTTP receives spans over HTTP: a protobuf ExportTraceServiceRequest,
// gzip or not, answered with an ExportTraceServiceResponse.
func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	var body io.Reader = req.Body
	if req.Header.Get("Content-Encoding") == "gzip" {
		gz, err := gzip.NewReader(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body = gz
	}
	b, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if ct := req.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		http.Error(w, "unsupported content type "+ct, http.StatusUnsupportedMediaType)
		return
	}
	var in collectorv1.ExportTraceServiceRequest
	if err := proto.Unmarshal(b, &in); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	r.add(&in, "http")
	out, _ := proto.Marshal(&collectorv1.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(out)
}

func (r *Receiver) add(req *collectorv1.ExportTraceServiceRequest, source string) {
	if r.countOnly {
		for _, rs := range req.GetResourceSpans() {
			for _, ss := range rs.GetScopeSpans() {
				r.count.Add(int64(len(ss.GetSpans())))
			}
		}
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := attrs(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.GetScopeSpans() {
			for _, sp := range ss.GetSpans() {
				r.spans = append(r.spans, flatten(sp, service, source))
				r.count.Add(1)
			}
		}
	}
}

func flatten(sp *tracev1.Span, service, source string) Span {
	s := Span{
		Service: service, Name: sp.GetName(), Kind: sp.GetKind(),
		TraceID: hex.EncodeToString(sp.GetTraceId()), SpanID: hex.EncodeToString(sp.GetSpanId()),
		Attrs: attrs(sp.GetAttributes()), Error: sp.GetStatus().GetCode() == tracev1.Status_STATUS_CODE_ERROR,
		Start: sp.GetStartTimeUnixNano(), End: sp.GetEndTimeUnixNano(), Source: source,
	}
	if p := sp.GetParentSpanId(); len(p) > 0 {
		s.ParentID = hex.EncodeToString(p)
	}
	for _, l := range sp.GetLinks() {
		s.Links = append(s.Links, hex.EncodeToString(l.GetTraceId())+"/"+hex.EncodeToString(l.GetSpanId()))
	}
	return s
}

func attrs(kvs []*commonv1.KeyValue) map[string]string {
	m := make(map[string]string, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = text(kv.GetValue())
	}
	return m
}

func text(v *commonv1.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonv1.AnyValue_StringValue:
		return x.StringValue
	case *commonv1.AnyValue_IntValue:
		return fmt.Sprint(x.IntValue)
	case *commonv1.AnyValue_DoubleValue:
		return fmt.Sprint(x.DoubleValue)
	case *commonv1.AnyValue_BoolValue:
		return fmt.Sprint(x.BoolValue)
	case *commonv1.AnyValue_ArrayValue:
		var parts []string
		for _, e := range x.ArrayValue.GetValues() {
			parts = append(parts, text(e))
		}
		return strings.Join(parts, ",")
	}
	return ""
}

// Spans returns the spans received so far, oldest start first.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	out := append([]Span(nil), r.spans...)
	r.mu.Unlock()
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

// Trace returns the spans of trace id.
func (r *Receiver) Trace(id string) []Span {
	var out []Span
	for _, s := range r.Spans() {
		if s.TraceID == id {
			out = append(out, s)
		}
	}
	return out
}

// Find returns the spans of spans whose name has prefix.
func Find(spans []Span, prefix string) []Span {
	var out []Span
	for _, s := range spans {
		if strings.HasPrefix(s.Name, prefix) {
			out = append(out, s)
		}
	}
	return out
}
