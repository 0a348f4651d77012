package kubetest

import "go.uber.org/goleak"

// serverGoroutines are the functions at the root of the goroutines that a
// running Server keeps in the test process: etcd's (its raft node, storage,
// listeners, and one gRPC transport and watch stream for each of the
// apiserver's connections and watches) and the wait for the apiserver's
// process; then the idle connections that client-go keeps to the
// apiserver, which end when the apiserver or the proxy in between does.
// None of them is a goroutine that client-go starts for a request, a watch
// or an informer: those stay reported.
var serverGoroutines = []string{
	"go.etcd.io/etcd/client/pkg/v3/fileutil.purgeFile.func1",
	"go.etcd.io/etcd/pkg/v3/schedule.(*fifo).run",
	"go.etcd.io/etcd/server/v3/embed.(*Etcd).startHandler.func1",
	"go.etcd.io/etcd/server/v3/embed.(*serveCtx).startHandler.func1",
	"go.etcd.io/etcd/server/v3/etcdserver.(*EtcdServer).GoAttach.func1",
	"go.etcd.io/etcd/server/v3/etcdserver.(*EtcdServer).run",
	"go.etcd.io/etcd/server/v3/etcdserver.(*raftNode).start.func1",
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc.(*watchServer).Watch.func1",
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc.(*watchServer).Watch.func2",
	"go.etcd.io/etcd/server/v3/lease.(*lessor).runLoop",
	"go.etcd.io/etcd/server/v3/storage/backend.(*backend).run",
	"go.etcd.io/etcd/server/v3/storage/mvcc.(*watchableStore).syncVictimsLoop",
	"go.etcd.io/etcd/server/v3/storage/mvcc.(*watchableStore).syncWatchersLoop",
	"go.etcd.io/etcd/server/v3/storage/wal.(*filePipeline).run",
	"go.etcd.io/raft/v3.(*node).run",
	"github.com/soheilhy/cmux.muxListener.Accept", // etcd's peer listener
	"google.golang.org/grpc.(*Server).handleRawConn.func1",
	"google.golang.org/grpc.(*Server).serveStreams.func2.1",
	"google.golang.org/grpc/internal/transport.(*http2Server).keepalive",
	"google.golang.org/grpc/internal/transport.NewServerTransport.func3",
	"github.com/zukhruf/lease/issuers/k8slease/internal/kubetest.(*Server).StartAPIServer.func1",
	"golang.org/x/net/http2.(*ClientConn).readLoop",
	"net/http.(*persistConn).readLoop",
	"net/http.(*persistConn).writeLoop",
}

// IgnoreGoroutines returns the options of goleak.Find and goleak.VerifyNone
// that ignore the goroutines of running Servers and client-go's idle
// connections to them, so that a test can look for the goroutines it
// leaked, such as a watch never stopped, while a shared Server still runs.
// Once every Server is stopped, goleak.Find needs no option for kubetest,
// etcd or client-go.
func IgnoreGoroutines() []goleak.Option {
	opts := make([]goleak.Option, len(serverGoroutines))
	for i, f := range serverGoroutines {
		opts[i] = goleak.IgnoreAnyFunction(f)
	}
	return opts
}
