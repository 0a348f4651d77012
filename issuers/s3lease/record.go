package s3lease

import (
	"encoding/json"
	"errors"
	"time"
)

// A record is the body of a lock object: who holds it, with which token,
// until when by the holder's clock. Every write of a lease gives it a new
// Seq and Expires, so no two writes have the same bytes: S3's ETag of a
// simple PUT is the MD5 of the body, and an If-Match on a repeated ETag
// would match another holder's identical write.
type record struct {
	Holder   string    `json:"holder"`            // Config.Holder
	ID       string    `json:"id"`                // the lease's random id
	Epoch    int64     `json:"epoch"`             // the fencing token
	Seq      int64     `json:"seq"`               // the lease's writes, counted from 1
	Expires  time.Time `json:"expires"`           // the writer's clock at the send, plus TTL
	TTL      string    `json:"ttl"`               // for operators
	Released bool      `json:"released,omitzero"` // Unlock wrote it: free now
}

var errNotRecord = errors.New("the lock object is not an s3lease record")

func (r record) encode() []byte {
	b, _ := json.Marshal(r) // a struct of plain fields
	return b
}

func decode(b []byte) (record, error) {
	var r record
	if err := json.Unmarshal(b, &r); err != nil || r.Epoch <= 0 || r.Expires.IsZero() {
		return record{}, errNotRecord
	}
	return r, nil
}
