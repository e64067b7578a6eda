package stack

import (
	"context"
	"fmt"

	"github.com/agentmesh/agentmesh/pkg/bus"
	"github.com/agentmesh/agentmesh/pkg/envconf"
	"github.com/agentmesh/agentmesh/pkg/subjects"
	"github.com/agentmesh/agentmesh/services/executor"
	"github.com/agentmesh/agentmesh/services/registry"
	"github.com/agentmesh/agentmesh/services/router"
	"github.com/agentmesh/agentmesh/services/scheduler"
	"github.com/agentmesh/agentmesh/services/state"
	"github.com/nats-io/nats.go"
)

// Service is one row of the service table: one of the five services, how
// its configuration is read, what it needs and how it is built. `agentmesh
// dev` (New) builds every row over one embedded NATS server; `agentmesh
// <service>` (NewService) builds one row against the bus the caller dials.
type Service struct {
	// Name is the service's subcommand and its bus identity
	// (subjects.Services, whose permissions its connection gets).
	Name string
	// Needs is what it needs besides its own bus connection.
	Needs Needs
	// ReadConfig reads its Config from its AGENTMESH_* variables into its
	// field of cfg (with its defaults).
	ReadConfig func(get envconf.Getter, cfg *Config) error
	// build builds it on nc (ready when it returns) and returns its Run.
	build func(s *Stack, ctx context.Context, nc *nats.Conn) (func(context.Context) error, error)
}

// Needs is what a service needs from the stack.
type Needs struct {
	// Store: the system of record (openStore: Postgres at PostgresURL,
	// else the embedded store on the service's own connection).
	Store bool
	// Model: a model endpoint (Executor.Model.BaseURL; New starts the
	// scripted model when none is configured, NewService refuses).
	Model bool
}

// Services returns the table in start order: state, registry, scheduler,
// executor, router. Stop is the reverse.
func Services() []Service {
	return []Service{
		{Name: subjects.ServiceState, Needs: Needs{Store: true}, build: (*Stack).buildState,
			ReadConfig: read(state.ConfigFromEnv, func(c *Config) *state.Config { return &c.State })},
		{Name: subjects.ServiceRegistry, build: (*Stack).buildRegistry,
			ReadConfig: read(registry.ConfigFromEnv, func(c *Config) *registry.Config { return &c.Registry })},
		{Name: subjects.ServiceScheduler, build: (*Stack).buildScheduler,
			ReadConfig: read(scheduler.ConfigFromEnv, func(c *Config) *scheduler.Config { return &c.Scheduler })},
		{Name: subjects.ServiceExecutor, Needs: Needs{Model: true}, build: (*Stack).buildExecutor,
			ReadConfig: read(executor.ConfigFromEnv, func(c *Config) *executor.Config { return &c.Executor })},
		{Name: subjects.ServiceRouter, build: (*Stack).buildRouter,
			ReadConfig: read(router.ConfigFromEnv, func(c *Config) *router.Config { return &c.Router })},
	}
}

// Lookup returns the row of the named service.
func Lookup(name string) (Service, bool) {
	for _, svc := range Services() {
		if svc.Name == name {
			return svc, true
		}
	}
	return Service{}, false
}

// EnvPostgresURL is the store's variable, read with the state service.
const EnvPostgresURL = "AGENTMESH_POSTGRES_URL"

// ConfigFromEnv reads, through get, the bus settings every service shares
// (Prefix, Streams) and the configuration of the named services (none: all
// of them), with the store's URL when state is one of them. A bad value is
// an *envconf.Error naming its variable.
func ConfigFromEnv(get envconf.Getter, names ...string) (Config, error) {
	rows, err := rowsOf(names)
	if err != nil {
		return Config{}, err
	}
	r := envconf.New(get)
	var c Config
	c.Prefix, c.Streams = bus.ReadSettings(r)
	for _, row := range rows {
		if row.Needs.Store {
			c.PostgresURL = r.String(EnvPostgresURL)
		}
	}
	if err := r.Err(); err != nil {
		return Config{}, err
	}
	for _, row := range rows {
		if err := row.ReadConfig(get, &c); err != nil {
			return Config{}, err
		}
	}
	return c, nil
}

// rowsOf returns the rows of names in table order (none: every row).
func rowsOf(names []string) ([]Service, error) {
	if len(names) == 0 {
		return Services(), nil
	}
	var rows []Service
	for _, svc := range Services() {
		for _, n := range names {
			if n == svc.Name {
				rows = append(rows, svc)
			}
		}
	}
	for _, n := range names {
		if _, ok := Lookup(n); !ok {
			return nil, fmt.Errorf("stack: no service %q", n)
		}
	}
	return rows, nil
}

// read makes a row's ReadConfig of a service's ConfigFromEnv and the field
// of Config it fills.
func read[C any](fromEnv func(envconf.Getter) (C, error), field func(*Config) *C) func(envconf.Getter, *Config) error {
	return func(get envconf.Getter, c *Config) (err error) {
		*field(c), err = fromEnv(get)
		return err
	}
}
