package s3test_test

import (
	"path/filepath"
	"testing"

	"github.com/zukhruf/lease/issuers/s3lease/internal/s3test"
)

// TestPath: the module beside the source requires a version, and the binary
// is kept by it under the user's cache folder, where make s3-versitygw put
// it, unless VERSITYGW names another file.
func TestPath(t *testing.T) {
	dir, err := s3test.ModuleDir()
	if err != nil {
		t.Fatal(err)
	}
	v, err := s3test.Version(dir)
	if err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv(s3test.Env, "")
	if got, err := s3test.Path(dir); err != nil || got != filepath.Join(cache, "zukhruf-lease", "versitygw-"+v) {
		t.Errorf("Path = %q, %v; want versitygw-%s under %s", got, err, v, cache)
	}
	t.Setenv(s3test.Env, "/some/versitygw")
	if got, err := s3test.Path(dir); err != nil || got != "/some/versitygw" {
		t.Errorf("Path with %s=/some/versitygw = %q, %v", s3test.Env, got, err)
	}
}
