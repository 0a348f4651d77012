package natstest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A Cluster is three nats-server processes routed to each other, with
// JetStream clustered across them.
type Cluster struct {
	Servers []*Server
}

// StartCluster starts a cluster of three in folders under dir and waits
// until JetStream answers.
func StartCluster(dir string) (*Cluster, error) {
	c := &Cluster{}
	var routes []int
	for i := range 3 {
		s, err := newServer(dir, fmt.Sprintf("n%d", i+1))
		if err != nil {
			c.Close()
			return nil, err
		}
		c.Servers = append(c.Servers, s)
		routes = append(routes, s.Port+routeOffset)
	}
	for _, s := range c.Servers {
		if err := s.config(routes); err != nil {
			c.Close()
			return nil, err
		}
		if err := s.Start(); err != nil {
			c.Close()
			return nil, err
		}
	}
	if err := waitJetStream(c.URL(App)); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// StartClusterT is StartCluster in a temporary folder of tb, closed when
// tb ends.
func StartClusterT(tb testing.TB) *Cluster {
	tb.Helper()
	c, err := StartCluster(tb.TempDir())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

// URL returns the URLs of every server, with user's credentials, as one
// comma-separated string nats.Connect takes.
func (c *Cluster) URL(user string) string {
	var us []string
	for _, s := range c.Servers {
		us = append(us, s.URL(user))
	}
	return strings.Join(us, ",")
}

// Server returns the server named name, or nil.
func (c *Cluster) Server(name string) *Server {
	for _, s := range c.Servers {
		if s.Name == name {
			return s
		}
	}
	return nil
}

// Close kills every server.
func (c *Cluster) Close() {
	for _, s := range c.Servers {
		s.Close()
	}
}

// StreamLeader returns the server that leads stream (a KV bucket's stream
// is "KV_" and the bucket's name).
func (c *Cluster) StreamLeader(ctx context.Context, nc *nats.Conn, stream string) (*Server, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	st, err := js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, err
	}
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return nil, fmt.Errorf("natstest: stream %s has no leader", stream)
	}
	if s := c.Server(info.Cluster.Leader); s != nil {
		return s, nil
	}
	return nil, fmt.Errorf("natstest: stream %s is led by %q, not a server of the cluster", stream, info.Cluster.Leader)
}

// apiResponse is what a JetStream API call answers.
type apiResponse struct {
	Success bool `json:"success"`
	Error   *struct {
		Code        int    `json:"code"`
		Description string `json:"description"`
	} `json:"error"`
}

func request(ctx context.Context, nc *nats.Conn, subject string) error {
	m, err := nc.RequestWithContext(ctx, subject, nil)
	if err != nil {
		return fmt.Errorf("natstest: %s: %w", subject, err)
	}
	var r apiResponse
	if err := json.Unmarshal(m.Data, &r); err != nil {
		return fmt.Errorf("natstest: %s: %w", subject, err)
	}
	if r.Error != nil {
		return fmt.Errorf("natstest: %s: %d %s", subject, r.Error.Code, r.Error.Description)
	}
	if !r.Success {
		return errors.New("natstest: " + subject + ": not a success: " + string(m.Data))
	}
	return nil
}

// StepDownStream asks the leader of stream to step down
// ($JS.API.STREAM.LEADER.STEPDOWN), through nc, a client of the stream's
// account.
func StepDownStream(ctx context.Context, nc *nats.Conn, stream string) error {
	return request(ctx, nc, "$JS.API.STREAM.LEADER.STEPDOWN."+stream)
}

// StepDownMeta asks the JetStream meta leader to step down
// ($JS.API.META.LEADER.STEPDOWN), through a connection of the system
// account's user.
func (c *Cluster) StepDownMeta(ctx context.Context) error {
	nc, err := nats.Connect(c.URL(Sys))
	if err != nil {
		return err
	}
	defer nc.Close()
	return request(ctx, nc, "$JS.API.META.LEADER.STEPDOWN")
}

// WaitStreamLeader waits until stream has a leader other than not (any
// leader if not is "") and returns it.
func (c *Cluster) WaitStreamLeader(ctx context.Context, nc *nats.Conn, stream, not string) (*Server, error) {
	for {
		s, err := c.StreamLeader(ctx, nc, stream)
		if err == nil && s.Name != not {
			return s, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("natstest: stream %s has no new leader: %w (last: %v)", stream, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
