// Package natstest runs real nats-server processes for the natslease tests:
// a single server with JetStream, and a cluster of three, each in a
// temporary folder on free loopback ports, in a process of its own, so that
// a kill is a real kill and SIGSTOP a real pause. The binary comes from
// package natsbin, built once and cached.
//
// Every server has three accounts: APP, with JetStream, whose users are
// "app" (all permissions) and "ro" (no publish to $KV.>); NOJS, without
// JetStream (user "nojs"); and the system account SYS (user "sys"), whose
// user may step the JetStream meta leader down.
package natstest
