// Copyright 2016 The Go Authors. All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE.x-tools file.
//
// Adapted from golang.org/x/tools/go/analysis/passes/lostcancel, whose
// control-flow search it keeps as it is: only the calls it looks for and
// its messages differ.

// Package signalcancel defines an Analyzer that reports a cancel func of
// [signal.Signal.Context], or a release func of [signal.Any], that is
// dropped or not called on every path, as go vet's lostcancel does for
// package context, which it does not know.
//
// A context made by Signal.Context from a parent other than Background is
// registered on the lease until its cancel, its parent's end, the loss or the
// release; one made from Background is kept by the lease's own context until
// the loss or the release. A merged signal from signal.Any stays on its live
// sources until its release. The analyzer's reports read as lostcancel's:
//
//	the cancel function returned by Signal.Context should be called, not discarded, to avoid a context leak
//	the cancel function is not used on all paths (possible context leak)
//	this return statement may be reached without using the cancel var defined on line 12
//
// [signal.Signal.Context]: https://pkg.go.dev/github.com/zukhruf/lease/signal#Signal.Context
// [signal.Any]: https://pkg.go.dev/github.com/zukhruf/lease/signal#Any
package signalcancel

import (
	"fmt"
	"go/ast"
	"go/types"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/passes/ctrlflow"
	"golang.org/x/tools/go/analysis/passes/inspect"
	"golang.org/x/tools/go/ast/inspector"
	"golang.org/x/tools/go/cfg"
)

// Analyzer reports a Signal.Context cancel or a signal.Any release that is
// dropped or not called on every path.
var Analyzer = &analysis.Analyzer{
	Name: "signalcancel",
	Doc: "check that the cancel of Signal.Context and the release of signal.Any are called\n\n" +
		"A cancel func of github.com/zukhruf/lease/signal's Signal.Context, or the release func " +
		"of its Any, must be called on every path, as go vet's lostcancel requires of package context.",
	URL: "https://pkg.go.dev/github.com/zukhruf/lease/signalcancel",
	Run: run,
	Requires: []*analysis.Analyzer{
		inspect.Analyzer,
		ctrlflow.Analyzer,
	},
}

// SignalPath is the import path of the package whose calls the analyzer
// checks.
const SignalPath = "github.com/zukhruf/lease/signal"

func run(pass *analysis.Pass) (any, error) {
	// Fast path: a package that depends on no signal package makes no call
	// to it. A *signal.Signal may come through another package (controller),
	// so the imports are followed.
	if !dependsOn(pass.Pkg, SignalPath, make(map[*types.Package]bool)) {
		return nil, nil
	}
	inspect := pass.ResultOf[inspect.Analyzer].(*inspector.Inspector)
	nodeTypes := []ast.Node{
		(*ast.FuncLit)(nil),
		(*ast.FuncDecl)(nil),
	}
	inspect.Preorder(nodeTypes, func(n ast.Node) {
		runFunc(pass, n)
	})
	return nil, nil
}

func dependsOn(pkg *types.Package, path string, seen map[*types.Package]bool) bool {
	if pkg.Path() == path {
		return true
	}
	if seen[pkg] {
		return false
	}
	seen[pkg] = true
	for _, imp := range pkg.Imports() {
		if dependsOn(imp, path, seen) {
			return true
		}
	}
	return false
}

// A call the analyzer looks for, and how its reports name it.
type call struct {
	name string // Signal.Context or signal.Any
	fn   string // cancel or release
	leak string // context or signal
}

func runFunc(pass *analysis.Pass, node ast.Node) {
	var funcScope *types.Scope
	switch v := node.(type) {
	case *ast.FuncLit:
		funcScope = pass.TypesInfo.Scopes[v.Type]
	case *ast.FuncDecl:
		funcScope = pass.TypesInfo.Scopes[v.Type]
	}

	// Maps each cancel or release variable to its defining
	// ValueSpec/AssignStmt, and to the call that made it.
	cancelvars := make(map[*types.Var]ast.Node)
	calls := make(map[*types.Var]call)

	ast.PreorderStack(node, nil, func(n ast.Node, stack []ast.Node) bool {
		if _, ok := n.(*ast.FuncLit); ok && len(stack) > 0 {
			return false // don't stray into nested functions
		}

		// Look for n=SelectorExpr beneath stack=[{AssignStmt,ValueSpec} CallExpr]:
		//
		//   ctx, cancel    := sig.Context(...)
		//   ctx, cancel     = sig.Context(...)
		//   var ctx, cancel = sig.Context(...)
		//   m, release     := signal.Any(...)
		//
		c, ok := calledFunc(pass.TypesInfo, n)
		if !ok || len(stack) < 2 || !isCallOf(stack[len(stack)-1], n) {
			return true
		}
		var id *ast.Ident // id of cancel var
		stmt := stack[len(stack)-2]
		switch stmt := stmt.(type) {
		case *ast.ValueSpec:
			if len(stmt.Names) > 1 {
				id = stmt.Names[1]
			}
		case *ast.AssignStmt:
			if len(stmt.Lhs) > 1 {
				id, _ = stmt.Lhs[1].(*ast.Ident)
			}
		}
		if id != nil {
			if id.Name == "_" {
				pass.ReportRangef(id,
					"the %s function returned by %s should be called, not discarded, to avoid a %s leak",
					c.fn, c.name, c.leak)
			} else if v, ok := pass.TypesInfo.Uses[id].(*types.Var); ok {
				// If the variable is defined outside function scope,
				// do not analyze it.
				if funcScope.Contains(v.Pos()) {
					cancelvars[v] = stmt
					calls[v] = c
				}
			} else if v, ok := pass.TypesInfo.Defs[id].(*types.Var); ok {
				cancelvars[v] = stmt
				calls[v] = c
			}
		}
		return true
	})

	if len(cancelvars) == 0 {
		return // no need to inspect CFG
	}

	cfgs := pass.ResultOf[ctrlflow.Analyzer].(*ctrlflow.CFGs)
	var g *cfg.CFG
	var sig *types.Signature
	switch node := node.(type) {
	case *ast.FuncDecl:
		sig, _ = pass.TypesInfo.Defs[node.Name].Type().(*types.Signature)
		if sig != nil && sig.Recv() == nil &&
			node.Name.Name == "main" && pass.Pkg.Name() == "main" {
			// Returning from main.main terminates the process, and
			// with it every lease.
			return
		}
		g = cfgs.FuncDecl(node)

	case *ast.FuncLit:
		sig, _ = pass.TypesInfo.Types[node.Type].Type.(*types.Signature)
		g = cfgs.FuncLit(node)
	}
	if sig == nil {
		return // missing type information
	}

	for v, stmt := range cancelvars {
		if ret := lostCancelPath(pass, g, v, stmt, sig); ret != nil {
			lineno := pass.Fset.Position(stmt.Pos()).Line
			pass.ReportRangef(stmt, "the %s function is not used on all paths (possible %s leak)", v.Name(), calls[v].leak)

			pos, end := ret.Pos(), ret.End()
			// golang/go#64547: cfg.Block.Return may return a synthetic
			// ReturnStmt that overflows the file.
			if pass.Fset.File(pos) != pass.Fset.File(end) {
				end = pos
			}
			pass.Report(analysis.Diagnostic{
				Pos:     pos,
				End:     end,
				Message: fmt.Sprintf("this return statement may be reached without using the %s var defined on line %d", v.Name(), lineno),
			})
		}
	}
}

// isCallOf reports whether n is a call of fun.
func isCallOf(n, fun ast.Node) bool {
	c, ok := n.(*ast.CallExpr)
	return ok && c.Fun == fun
}

// calledFunc reports whether n names (*signal.Signal).Context or signal.Any,
// and how to name it in a report.
func calledFunc(info *types.Info, n ast.Node) (call, bool) {
	sel, ok := n.(*ast.SelectorExpr)
	if !ok {
		return call{}, false
	}
	fn, ok := info.Uses[sel.Sel].(*types.Func)
	if !ok || fn.Pkg() == nil || fn.Pkg().Path() != SignalPath {
		return call{}, false
	}
	recv := fn.Signature().Recv()
	switch {
	case fn.Name() == "Context" && recv != nil && isSignal(recv.Type()):
		return call{name: "Signal.Context", fn: "cancel", leak: "context"}, true
	case fn.Name() == "Any" && recv == nil:
		return call{name: "signal.Any", fn: "release", leak: "signal"}, true
	}
	return call{}, false
}

// isSignal reports whether t is signal.Signal or a pointer to it.
func isSignal(t types.Type) bool {
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	named, ok := t.(*types.Named)
	return ok && named.Obj().Name() == "Signal" && named.Obj().Pkg() != nil && named.Obj().Pkg().Path() == SignalPath
}

// lostCancelPath finds a path through the CFG, from stmt (which defines
// the 'cancel' variable v) to a return statement, that doesn't "use" v.
// If it finds one, it returns the return statement (which may be synthetic).
// sig is the function's type, if known.
func lostCancelPath(pass *analysis.Pass, g *cfg.CFG, v *types.Var, stmt ast.Node, sig *types.Signature) *ast.ReturnStmt {
	vIsNamedResult := sig != nil && tupleContains(sig.Results(), v)

	// uses reports whether stmts contain a "use" of variable v.
	uses := func(pass *analysis.Pass, v *types.Var, stmts []ast.Node) bool {
		found := false
		for _, stmt := range stmts {
			ast.Inspect(stmt, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.Ident:
					if pass.TypesInfo.Uses[n] == v {
						found = true
					}
				case *ast.ReturnStmt:
					// A naked return statement counts as a use
					// of the named result variables.
					if n.Results == nil && vIsNamedResult {
						found = true
					}
				}
				return !found
			})
		}
		return found
	}

	// blockUses computes "uses" for each block, caching the result.
	memo := make(map[*cfg.Block]bool)
	blockUses := func(pass *analysis.Pass, v *types.Var, b *cfg.Block) bool {
		res, ok := memo[b]
		if !ok {
			res = uses(pass, v, b.Nodes)
			memo[b] = res
		}
		return res
	}

	// Find the var's defining block in the CFG,
	// plus the rest of the statements of that block.
	var defblock *cfg.Block
	var rest []ast.Node
outer:
	for _, b := range g.Blocks {
		for i, n := range b.Nodes {
			if n == stmt {
				defblock = b
				rest = b.Nodes[i+1:]
				break outer
			}
		}
	}
	if defblock == nil {
		panic("signalcancel: internal error: can't find defining block for cancel var")
	}

	// Is v "used" in the remainder of its defining block?
	if uses(pass, v, rest) {
		return nil
	}

	// Does the defining block return without using v?
	if ret := defblock.Return(); ret != nil {
		return ret
	}

	// Search the CFG depth-first for a path, from defblock to a
	// return block, in which v is never "used".
	seen := make(map[*cfg.Block]bool)
	var search func(blocks []*cfg.Block) *ast.ReturnStmt
	search = func(blocks []*cfg.Block) *ast.ReturnStmt {
		for _, b := range blocks {
			if seen[b] {
				continue
			}
			seen[b] = true

			// Prune the search if the block uses v.
			if blockUses(pass, v, b) {
				continue
			}

			// Found path to return statement?
			if ret := b.Return(); ret != nil {
				return ret
			}

			if ret := search(b.Succs); ret != nil {
				return ret
			}
		}
		return nil
	}
	return search(defblock.Succs)
}

func tupleContains(tuple *types.Tuple, v *types.Var) bool {
	for v0 := range tuple.Variables() {
		if v0 == v {
			return true
		}
	}
	return false
}
