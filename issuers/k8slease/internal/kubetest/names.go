package kubetest

import (
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

var names atomic.Int64

// UniqueName returns a name no other object made by the test binary has:
// the test's name in the letters an object's name may have, cut to 40, and
// a number.
func UniqueName(t testing.TB) string {
	name := []byte(strings.ToLower(t.Name()))
	for i, c := range name {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
			name[i] = '-'
		}
	}
	if len(name) > 40 {
		name = name[:40]
	}
	return fmt.Sprintf("%s-%d", strings.Trim(string(name), "-"), names.Add(1))
}

// Restricted returns the configuration of a new user of s whose Role in
// namespace grants verbs on leases, and list, and a func that grants other
// verbs instead (list kept). The admin's token impersonates the user.
// Restricted returns once the Role has taken effect: a List as the user
// succeeds.
func (s *Server) Restricted(t testing.TB, namespace string, verbs ...string) (*rest.Config, func(verbs ...string)) {
	t.Helper()
	admin := s.Clientset()
	user := "user-" + UniqueName(t)
	rules := func(verbs []string) []rbacv1.PolicyRule {
		return []rbacv1.PolicyRule{{
			APIGroups: []string{coordinationv1.GroupName},
			Resources: []string{"leases"},
			Verbs:     append([]string{"list"}, verbs...),
		}}
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: namespace}, Rules: rules(verbs)}
	if _, err := admin.RbacV1().Roles(namespace).Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: namespace},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: user},
	}
	if _, err := admin.RbacV1().RoleBindings(namespace).Create(t.Context(), binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := s.Config()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	// A client of its own for the wait, whose idle connections are
	// closed at once: the caller's clients of cfg are the caller's.
	own := rest.CopyConfig(cfg)
	own.Dial = (&net.Dialer{}).DialContext
	cs, err := kubernetes.NewForConfig(own)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if c, ok := cs.CoordinationV1().RESTClient().(*rest.RESTClient); ok && c.Client != nil {
			c.Client.CloseIdleConnections()
		}
	}()
	for start := time.Now(); ; time.Sleep(50 * time.Millisecond) {
		_, err := cs.CoordinationV1().Leases(namespace).List(t.Context(), metav1.ListOptions{Limit: 1})
		if err == nil {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("the user's Role did not take effect: %v", err)
		}
	}
	return cfg, func(verbs ...string) {
		t.Helper()
		role.Rules = rules(verbs)
		var err error
		if role, err = admin.RbacV1().Roles(namespace).Update(t.Context(), role, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}
