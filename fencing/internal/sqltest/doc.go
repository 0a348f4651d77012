// Package sqltest runs the SQL fence of package fencing on real PostgreSQL
// and MariaDB servers that its tests start: the conformance suite of
// fencingtest, its negative controls, the mistakes a transaction can make,
// and the cost of a fenced write beside an unfenced one. A module of its
// own, so that the library never depends on a database driver; never
// published.
package sqltest
