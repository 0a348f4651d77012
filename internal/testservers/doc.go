// Package testservers holds, in packages of their own, the starters of the
// real servers that the tests of this repository's modules run against:
// pgserver (PostgreSQL, PgBouncer) and mysqlserver (MariaDB). A module of
// its own that is never published, required by a test module through a
// replace, so that one copy serves every module whose tests start a server.
package testservers
