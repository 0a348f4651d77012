package fencing_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/zukhruf/lease/fencing"
	"github.com/zukhruf/lease/leasetest"
)

// A holder's token comes from its lease; the store keeps the highest one it
// accepted and refuses the older holder's late write.
func Example() {
	ctx := context.Background()
	var locker leasetest.Memory // any lease.Locker: an issuer's, on its server
	var store fencing.Memory    // the resource's fence

	old, _ := locker.Lock(ctx, "invoice-42")
	oldToken := old.Token()
	locker.Lose("invoice-42", errors.New("paused past its lease")) // the next holder may take it

	l, _ := locker.Lock(ctx, "invoice-42")
	defer l.Unlock(ctx)
	_ = store.Advance(ctx, "invoice-42", l.Token()) // advance on grant: older holders are fenced off

	err := store.Do(ctx, "invoice-42", oldToken, func(context.Context) error {
		fmt.Println("never run")
		return nil
	})
	fmt.Println(errors.Is(err, fencing.ErrStale))
	// Output: true
}

func ExampleMemory_Do() {
	ctx := context.Background()
	var m fencing.Memory
	rows := map[string]string{}
	write := func(token int64, row string) error {
		return m.Do(ctx, "invoice-42", token, func(context.Context) error {
			rows["invoice-42"] = row // the check and the write are one step
			return nil
		})
	}
	fmt.Println(write(2, "from holder 2"))
	fmt.Println(write(1, "from holder 1, late"))
	fmt.Println(rows["invoice-42"])
	// Output:
	// <nil>
	// fencing: stale token 1 for resource "invoice-42": token 2 was accepted
	// from holder 2
}

// The client sends the lease's token with each request; the server refuses
// a request older than one it served with 409 Conflict.
func ExampleHandler() {
	var fence fencing.Memory
	srv := httptest.NewServer(fencing.Handler(&fence, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent) // the write, under the fence
	})))
	defer srv.Close()
	client := &http.Client{Transport: &fencing.Transport{}}

	put := func(token int64) {
		ctx := fencing.WithToken(context.Background(), "invoice-42", token) // l.Token() of the holder's lease
		req, _ := http.NewRequestWithContext(ctx, http.MethodPut, srv.URL+"/rows", nil)
		resp, err := client.Do(req)
		if err != nil {
			fmt.Println(err)
			return
		}
		resp.Body.Close()
		fmt.Println(resp.StatusCode, fencing.StaleResponse(resp))
	}
	put(7)
	put(6)
	// Output:
	// 204 <nil>
	// 409 fencing: stale token 6 for resource "invoice-42": token 7 was accepted
}

// The fence and the holder's writes commit in one transaction, or not at
// all.
func ExampleSQL_Check() {
	fence := fencing.SQL{Table: "fences", Dialect: fencing.Postgres}
	write := func(ctx context.Context, db *sql.DB, token int64, id int, row string) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback() // after Commit, does nothing
		if err := fence.Check(ctx, tx, "invoice-42", token); err != nil {
			return err // errors.Is(err, fencing.ErrStale): nothing was written
		}
		if _, err := tx.ExecContext(ctx, "UPDATE invoices SET row = $1 WHERE id = $2", row, id); err != nil {
			return err
		}
		return tx.Commit()
	}
	_ = write
}
