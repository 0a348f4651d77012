// Package healthtest runs the health adapters and the at-risk warning on a
// real redis-server: a module of its own that is never published, so that
// the adapters' modules need no store's client. Its Redis is the Debian
// package redis-server, started by [StartRedis] in a temporary folder.
package healthtest
