package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	busv1 "github.com/agentmesh/agentmesh/pkg/api/agentmesh/bus/v1"
	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/busauth"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"
)

// runAudit prints the audit stream's records (agentmesh audit): each
// request a state or registry instance handled, one JSON object a line,
// read from the batches bus.Auditor stores.
func runAudit(ctx context.Context, args []string, w io.Writer) error {
	flags := flag.NewFlagSet("agentmesh audit", flag.ContinueOnError)
	url := flags.String("nats", nats.DefaultURL, "the NATS server")
	creds := flags.String("creds", "", "the operator's creds file (admin.creds of `agentmesh bus init`: no service may read the audit stream); empty for a server without authentication")
	ca := flags.String("ca", "", "the CA of the NATS server's TLS certificate (ca.pem)")
	prefix := flags.String("prefix", subjects.DefaultPrefix, "the subject prefix")
	after := flags.Uint64("after", 0, "print the records of the batches stored after this sequence of the stream")
	subject := flags.String("subject", "", "only the records of requests on this subject (e.g. am.state.task.create)")
	if err := flags.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	names, err := subjects.New(*prefix)
	if err != nil {
		return usageError{err}
	}
	opts := []nats.Option{nats.Name("agentmesh audit"), nats.Timeout(10 * time.Second)}
	if *creds != "" {
		b, err := os.ReadFile(*creds)
		if err != nil {
			return err
		}
		auth, err := busauth.ClientOptions(b, "", nil)
		if err != nil {
			return err
		}
		opts = append(opts, auth...)
	}
	if *ca != "" {
		opts = append(opts, nats.RootCAs(*ca))
	}
	nc, err := nats.Connect(*url, opts...)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", *url, err)
	}
	defer nc.Close()
	return printAudit(ctx, nc, names, auditFilter{after: *after, subject: *subject}, w)
}

// auditFilter picks the records agentmesh audit prints.
type auditFilter struct {
	after   uint64 // the batches stored after this sequence
	subject string // the requests on this subject ("" all)
}

// printAudit writes the audit records f picks as JSON lines:
// {"seq": the batch's stream sequence, "record": the AuditRecord}.
func printAudit(ctx context.Context, nc *nats.Conn, names subjects.Names, f auditFilter, w io.Writer) error {
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	enc := protojson.MarshalOptions{UseProtoNames: true}
	_, err = bus.ReadAudit(ctx, js, names.AuditStream(), f.after, func(seq uint64, rec *busv1.AuditRecord) error {
		if f.subject != "" && rec.GetSubject() != f.subject {
			return nil
		}
		line, err := enc.Marshal(rec)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(w, "{\"seq\":%d,\"record\":%s}\n", seq, line)
		return err
	})
	return err
}
