// Package s3test runs a real S3 server for the tests of s3lease and
// s3fence: versitygw, an Apache-2.0 S3 gateway written in Go, on its posix
// backend in a temporary folder, in a process of its own, so that a test
// can kill it, stop it (SIGSTOP) and start it again on the same folder and
// port.
//
// The binary is built once from the module in s3test/versitygw, which pins
// github.com/versity/versitygw, and kept in the user's cache folder
// (zukhruf-lease/versitygw-VERSION; the environment variable VERSITYGW
// names another file), as the kube-apiserver of the k8slease tests is:
// only the first run on a machine pays for the build ([Ensure]).
package s3test
