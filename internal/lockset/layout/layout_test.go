package layout_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/zukhruf/lease/internal/lockset/layout"
)

func TestProcesses(t *testing.T) {
	tests := []struct {
		name                       string
		locks, perProcess, clients int
		want                       [][]string
	}{
		{"one lock a process", 3, 1, 2, [][]string{{"lease-a"}, {"lease-a"}, {"lease-b"}, {"lease-b"}, {"lease-c"}, {"lease-c"}}},
		{"two locks a process", 4, 2, 2, [][]string{{"lease-a", "lease-b"}, {"lease-a", "lease-b"}, {"lease-c", "lease-d"}, {"lease-c", "lease-d"}}},
		{"every lock in one process", 3, 3, 1, [][]string{{"lease-a", "lease-b", "lease-c"}}},
		{"numbers beyond 26", 30, 15, 1, [][]string{
			{"lease-00", "lease-01", "lease-02", "lease-03", "lease-04", "lease-05", "lease-06", "lease-07", "lease-08", "lease-09", "lease-10", "lease-11", "lease-12", "lease-13", "lease-14"},
			{"lease-15", "lease-16", "lease-17", "lease-18", "lease-19", "lease-20", "lease-21", "lease-22", "lease-23", "lease-24", "lease-25", "lease-26", "lease-27", "lease-28", "lease-29"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := layout.Processes("lease", tt.locks, tt.perProcess, tt.clients)
			if err != nil {
				t.Fatalf("Processes: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Processes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestProcessesEachLockClientsTimes(t *testing.T) {
	procs, err := layout.Processes("lease", 400, 200, 2)
	if err != nil {
		t.Fatalf("Processes: %v", err)
	}
	if len(procs) != 4 {
		t.Fatalf("len(Processes) = %d, want 4", len(procs))
	}
	seen := map[string]int{}
	for _, p := range procs {
		for _, l := range p {
			seen[l]++
		}
	}
	if len(seen) != 400 {
		t.Errorf("%d locks named, want 400", len(seen))
	}
	for l, n := range seen {
		if n != 2 {
			t.Errorf("lock %s in %d processes, want 2", l, n)
		}
	}
	if got, want := layout.Name("lease", 7, 400), "lease-007"; got != want {
		t.Errorf("Name(lease, 7, 400) = %q, want %q", got, want)
	}
}

func TestProcessesRefused(t *testing.T) {
	tests := []struct {
		name                       string
		locks, perProcess, clients int
	}{
		{"not a multiple", 5, 2, 1},
		{"no lock a process", 4, 0, 1},
		{"no client", 4, 2, 0},
		{"no lock", 0, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := layout.Processes("lease", tt.locks, tt.perProcess, tt.clients); err == nil {
				t.Errorf("Processes(%d, %d, %d) = nil error, want one", tt.locks, tt.perProcess, tt.clients)
			}
		})
	}
}
