package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/zukhruf/lease/internal/faultnet"
)

// The kinds of fault made to one member of an etcd cluster of three
// (the failover mix): its peer links made silent both ways, so the others
// elect a leader without it; its process killed, and restarted on its data
// when the fault ends; its process stopped. The member is the leader half
// of the time.
const (
	IsolateMember = "isolate-member"
	KillMember    = "kill-member"
	PauseMember   = "pause-member"
)

// clusterSize is the number of members of a run's etcd cluster: a fault
// to one leaves a quorum.
const clusterSize = 3

// member is one member of the run's etcd cluster.
type member struct {
	name       string
	args       []string        // the command's arguments, for a restart
	clientAddr string          // the clients' address, which the clients reach through their own proxies
	peerProxy  *faultnet.Proxy // every peer link to the member passes through it
	proc       *proc           // under runner.mu
}

// startEtcdCluster starts a cluster of clusterSize members, each its own
// process, whose peer links each pass through the member's proxy, and
// returns the members' client addresses, joined by commas.
func (r *runner) startEtcdCluster() (string, error) {
	var peers []string
	for i := range clusterSize {
		clientPort, err := freePort()
		if err != nil {
			return "", err
		}
		peerPort, err := freePort()
		if err != nil {
			return "", err
		}
		proxy, err := faultnet.Listen("127.0.0.1:" + strconv.Itoa(peerPort))
		if err != nil {
			return "", err
		}
		name := fmt.Sprintf("m%d", i+1)
		peers = append(peers, name+"=http://"+proxy.Addr())
		r.members = append(r.members, &member{
			name:       name,
			clientAddr: "127.0.0.1:" + strconv.Itoa(clientPort),
			peerProxy:  proxy,
			args: []string{"server", "-issuer", "etcd", "-dir", filepath.Join(r.dir, "server", name),
				"-port", strconv.Itoa(clientPort), "-name", name, "-peer-port", strconv.Itoa(peerPort), "-advertise", proxy.Addr()},
		})
	}
	// A member is ready once a quorum serves: every member starts before
	// any is waited for.
	var waits []func() error
	var addrs []string
	for _, m := range r.members {
		m.args = append(m.args, "-cluster", strings.Join(peers, ","))
		wait, err := r.startMember(m)
		if err != nil {
			return "", err
		}
		waits = append(waits, wait)
		addrs = append(addrs, m.clientAddr)
	}
	for _, wait := range waits {
		if err := wait(); err != nil {
			return "", err
		}
	}
	return strings.Join(addrs, ","), nil
}

// startMember starts m's process and returns a function that waits until
// it serves.
func (r *runner) startMember(m *member) (func() error, error) {
	p, stdout, err := startPiped(m.name, exec.Command(r.self, m.args...))
	if err != nil {
		return nil, err
	}
	cmd := p.cmd
	r.mu.Lock()
	m.proc = p
	r.mu.Unlock()
	return func() error {
		sc := bufio.NewScanner(stdout)
		if !sc.Scan() {
			cmd.Wait()
			close(p.done)
			return fmt.Errorf("etcd member %s exited before it served", m.name)
		}
		go func() {
			io.Copy(io.Discard, stdout)
			cmd.Wait()
			close(p.done)
		}()
		if !strings.HasPrefix(sc.Text(), "endpoint ") {
			p.signal(syscall.SIGKILL)
			return fmt.Errorf("etcd member %s said %q", m.name, sc.Text())
		}
		return nil
	}, nil
}

// servers returns the server processes of the run: the members of the
// cluster, PostgreSQL's primary and standby, or the one server.
func (r *runner) servers() []*proc {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pg != nil {
		return r.pg.servers()
	}
	if len(r.members) == 0 {
		return []*proc{r.server}
	}
	var ps []*proc
	for _, m := range r.members {
		ps = append(ps, m.proc)
	}
	return ps
}

// pickMember returns the cluster's leader half of the time, else a member
// at random (the leader, too, a third of those times), as choice picks;
// and the fault's target as the run records it: the member's name, with
// "/leader" if it led when picked.
func (r *runner) pickMember(choice uint64) (*member, string) {
	m := r.members[(choice>>1)%uint64(len(r.members))]
	leader := r.leader()
	if choice&1 == 0 && leader != nil {
		m = leader
	}
	if m == leader {
		return m, m.name + "/leader"
	}
	return m, m.name
}

// leader returns the member that says it leads, straight to its client
// port (past the clients' proxies), or nil if none says so within a TTL.
func (r *runner) leader() *member {
	ctx, cancel := context.WithTimeout(context.Background(), r.ttl)
	defer cancel()
	for _, m := range r.members {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{m.clientAddr}, DialTimeout: r.ttl, Logger: zap.NewNop()})
		if err != nil {
			continue
		}
		st, err := cli.Status(ctx, m.clientAddr)
		cli.Close()
		if err == nil && st.Leader != 0 && st.Leader == st.Header.MemberId {
			return m
		}
	}
	return nil
}

// memberFault makes a fault of kind to m and returns its heal.
func (r *runner) memberFault(kind string, m *member) func() {
	r.mu.Lock()
	p := m.proc
	r.mu.Unlock()
	switch kind {
	case IsolateMember:
		m.peerProxy.Drop(faultnet.Both)
		return func() {
			// A stream that lost bytes is garbage: reset it, so that
			// the peers dial again.
			m.peerProxy.Heal()
			m.peerProxy.Cut()
		}
	case KillMember:
		p.signal(syscall.SIGKILL)
		<-p.done
		return func() {
			err := errors.New("not started")
			for try := 0; try < 5 && err != nil; try++ {
				var wait func() error
				if wait, err = r.startMember(m); err == nil {
					err = wait()
				}
				if err != nil {
					time.Sleep(200 * time.Millisecond)
				}
			}
			if err != nil {
				fmt.Println("lockset: restart etcd member", m.name+":", err)
			}
		}
	case PauseMember:
		p.signal(syscall.SIGSTOP)
		return func() { p.signal(syscall.SIGCONT) }
	}
	panic("lockset: memberFault called with kind " + kind)
}
