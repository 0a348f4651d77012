package kubebin

// EnsureIn is Ensure for the module in dir, so that tests can give it a
// module of their own.
var EnsureIn = ensure
