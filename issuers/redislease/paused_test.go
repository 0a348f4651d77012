package redislease_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// The paused holder runs in a child process of the test binary, so that
// SIGSTOP stops all of it, its lease's goroutines and timer included, as a
// stop of a whole process or machine would.
const childEnv = "REDISLEASE_TEST_CHILD"

// childMain runs the paused holder when the test binary is started as one,
// and returns its exit code; it returns -1 in a plain test process.
//
// The holder locks REDISLEASE_KEY on REDISLEASE_ADDR and prints its token;
// then it checks its signal, prints "checked", waits for a line on its
// standard input (the parent stops it there, between its check and its
// write, and sends the line only after it continues it, so the stop cannot
// come after the write) and writes to the fenced resource
// REDISLEASE_RESOURCE with its token, printing "accepted" or "refused".
func childMain() int {
	if os.Getenv(childEnv) != "holder" {
		return -1
	}
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv("REDISLEASE_ADDR")})
	defer rdb.Close()
	ctx := context.Background()
	l, err := faultCfg.Lock(ctx, rdb, os.Getenv("REDISLEASE_KEY"))
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("token", l.Token())
	if err := l.Signal().Err(); err != nil {
		fmt.Println("error", err)
		return 1
	}
	fmt.Println("checked")
	bufio.NewReader(os.Stdin).ReadString('\n')
	ok, err := fencedWrite(ctx, rdb, os.Getenv("REDISLEASE_RESOURCE"), l.Token(), "a")
	switch {
	case err != nil:
		fmt.Println("error", err)
	case ok:
		fmt.Println("accepted")
	default:
		fmt.Println("refused")
	}
	l.Unlock(ctx)
	return 0
}

// pausedTrials runs n paused-holder trials and says in how many the token
// refused the stale write.
func pausedTrials(t *testing.T, n int) string {
	refused := 0
	for i := range n {
		w := pausedTrial(t, fmt.Sprintf("%s-%d", keyName(t), i))
		if w == "refused" {
			refused++
		} else {
			t.Errorf("a paused holder's stale write: %s, want refused", w)
		}
	}
	return fmt.Sprintf("Paused holder (a child process stopped with SIGSTOP between its check of the signal and its write, for longer than the TTL, B granted meanwhile): the token refused the stale write in %d of %d trials.", refused, n)
}

// pausedTrial runs one paused holder on key and returns what its write met.
func pausedTrial(t *testing.T, key string) string {
	resource := key + ":resource"
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=holder", "REDISLEASE_ADDR="+shared.Addr(), "REDISLEASE_KEY="+key, "REDISLEASE_RESOURCE="+resource)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Kill()
		cmd.Wait()
	}()
	lines := bufio.NewScanner(out)
	next := func() string {
		if !lines.Scan() {
			return "exited"
		}
		return lines.Text()
	}
	first := next()
	tok, ok := strings.CutPrefix(first, "token ")
	if !ok {
		return "the holder said " + first
	}
	aToken, _ := strconv.ParseInt(tok, 10, 64)
	if l := next(); l != "checked" {
		return "the holder said " + l
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	rdb := client(t, shared.Addr())
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	b, err := faultCfg.Lock(ctx, rdb, key)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Unlock(context.Background())
	if b.Token() <= aToken {
		t.Errorf("B's token %d, not above A's %d", b.Token(), aToken)
	}
	if ok, err := fencedWrite(ctx, rdb, resource, b.Token(), "b"); !ok || err != nil {
		t.Fatalf("B's write = %v, %v; want accepted", ok, err)
	}
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(stdin, "go")
	w := next()
	go io.Copy(io.Discard, out)
	return w
}
