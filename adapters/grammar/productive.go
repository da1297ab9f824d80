package grammar

// checkProductive refuses a schema with a part no finite JSON value satisfies (a required property or a
// minItems > 0 whose value recurses without end): the automaton would accept a prefix that can never be
// finished, and a model following it would write until its token limit. It computes the least fixpoint of
// "can finish" over the nodes and requires it of every node reachable from root.
func checkProductive(root *node, nodes []*node) error {
	ok := map[*node]bool{}
	finishes := func(n *node) bool {
		if n == nil {
			return true
		}
		switch n.kind {
		case kObject:
			if n.free {
				return true
			}
			for _, p := range n.props {
				if p.required && !ok[p.value] {
					return false
				}
			}
			return true
		case kArray:
			return n.minItems == 0 || ok[n.items]
		case kAlt:
			for _, a := range n.alts {
				if ok[a] {
					return true
				}
			}
			return false
		case kRef:
			return ok[n.ref]
		case kSeq:
			for _, p := range n.parts {
				if p.value != nil && !ok[p.value] {
					return false
				}
			}
			return true
		}
		return true // strings, numbers and literals were checked satisfiable when compiled; text can end
	}
	for changed := true; changed; {
		changed = false
		for _, n := range nodes {
			if !ok[n] && finishes(n) {
				ok[n], changed = true, true
			}
		}
	}
	seen := map[*node]bool{}
	var visit func(n *node) error
	visit = func(n *node) error {
		if n == nil || seen[n] {
			return nil
		}
		seen[n] = true
		if !ok[n] {
			return &SchemaError{Path: n.path, Msg: "no finite JSON value satisfies this schema: its required properties or minItems refer back to it without end"}
		}
		kids := []*node{n.items, n.ref, n.then}
		for _, p := range n.props {
			kids = append(kids, p.value)
		}
		kids = append(kids, n.alts...)
		for _, p := range n.parts {
			kids = append(kids, p.value)
		}
		for _, k := range kids {
			if err := visit(k); err != nil {
				return err
			}
		}
		return nil
	}
	return visit(root)
}
