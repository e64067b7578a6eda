package main

import (
	"fmt"
	"os"

	"github.com/agentmesh/agentmesh/pkg/telemetry"
	"github.com/agentmesh/agentmesh/pkg/telemetry/otlptest"
)

// traceTo starts an OTLP receiver that counts the spans it gets and points
// the servers ambench starts at it (their environment is ambench's): the
// standard variables, protocol proto. The returned function reports the
// count and stops the receiver.
func traceTo(proto string) (func(), error) {
	r, err := otlptest.New(true)
	if err != nil {
		return nil, err
	}
	endpoint := r.HTTPURL
	switch proto {
	case telemetry.ProtocolGRPC:
		endpoint = "http://" + r.GRPCAddr
	case telemetry.ProtocolHTTP:
	default:
		r.Close()
		return nil, fmt.Errorf("want grpc or http/protobuf, got %q", proto)
	}
	for k, v := range map[string]string{telemetry.EnvEndpoint: endpoint, telemetry.EnvProtocol: proto} {
		if err := os.Setenv(k, v); err != nil {
			r.Close()
			return nil, err
		}
	}
	fmt.Printf("tracing: every server exports its spans over %s to %s\n", proto, endpoint)
	return func() {
		fmt.Printf("tracing: %d spans received\n", r.Count())
		r.Close()
	}, nil
}
