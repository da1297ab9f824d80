package ports

import "context"

// Candidate is one token a drafter proposes for a block slot, with the drafter's probability of it.
type Candidate struct {
	Token Token
	Prob  float64
}

// TopDrafter is an optional DraftSession ability behind tree verification: DraftTop is Draft (the same
// context append, the same block of exactly bs slots, the same Proposal.Tokens, top.Slots of them) that also
// fills Proposal.Top: for each proposed slot, Tokens' token first, then the slot's other most probable tokens
// under the drafter's logits (softmax at temperature 1, ties to the lower id), top.K in all (fewer when the
// vocabulary is smaller). Prob is that softmax probability. For a DFlash drafter Tokens' token is the
// logits' argmax, so Top is the plain top-k; DFlash2's selector may pick another candidate first.
type TopDrafter interface {
	DraftTop(ctx context.Context, anchor Token, newCtx Taps, bs int, top TopRequest) (Proposal, error)
}

// TopRequest is what DraftTop proposes: K candidates (K ≥ 1) for each of the first Slots slots (1..bs−1;
// 0 means all bs−1). The block is still drafted with all bs slots, the drafter's regime, so each proposed
// slot's token and candidates are those of a full draft (bit for bit on the CPU backend); Proposal.Tokens and
// Proposal.Top hold Slots entries. A tree of n nodes reaches at most n−1 slots deep, and a drafter that reads
// no more than that saves the rest of its last layer, its LM head and the candidates' ranking.
//
// Narrow lets the drafter go further: every slot of the block still feeds the first layer's attention (its
// keys and values), but the layers after it run on the anchor and the proposed slots alone, so that the
// first layer's output projection and MLP, and every later layer, skip the slots no proposal reads. The
// proposals are then no longer a full draft's (the later layers' attention sees fewer slots), only the
// drafter's own cheaper approximation of them; what a generation commits never depends on them. A drafter
// without the shortcut (DFlash2's convolutions mix the slots; a batch of sequences) drafts in full.
type TopRequest struct {
	K      int
	Slots  int
	Narrow bool
}

// SlotsOf returns how many slots top asks of a block of bs slots (Slots, or bs−1 when it is 0 or more).
func (top TopRequest) SlotsOf(bs int) int {
	if top.Slots <= 0 || top.Slots > bs-1 {
		return max(bs-1, 0)
	}
	return top.Slots
}

// TreeVerifier is an optional Session ability: verify a tree of candidate continuations in one forward
// pass, then keep one path of it.
//
// A tree hangs from the session's end (Len() = n before the call): node i's parent is parents[i], a node
// before it (parents[i] < i) or −1 for a root, which follows the committed positions directly. A node at
// depth d (0 for a root) sits at position n+d and sees the committed positions and its own ancestors, in
// order, and nothing else; recurrent layers run along each node's ancestry. So each node's row is the row a
// plain Forward of its path (root … node) returns at that node: bit for bit on the CPU backend, within the
// backend's stated tolerance elsewhere. Speculative decoding stays lossless because of it.
type TreeVerifier interface {
	// ForwardTree runs tokens as the nodes of the tree that parents describes (len(parents) == len(tokens)).
	// opts.Rows must be 0 (one row per node, in node order); RecordTape is ignored (the session keeps what
	// KeepPath needs); Taps, when asked, cover every node. A tree deeper than the context has room for is
	// refused before any work, like Forward, and so is malformed input (parents, tokens, opts): those
	// refusals leave the session as it was. Afterwards the session holds the tree: only KeepPath or Close
	// may follow, and Len() stays n until KeepPath. An error once the pass has started leaves the session
	// unusable (close it).
	ForwardTree(ctx context.Context, tokens []Token, parents []int, opts ForwardOptions) (ForwardResult, error)
	// KeepPath keeps the nodes of path and drops the others: path[0] is a root and each next node a child
	// of the one before (path may be empty). Afterwards Len() = n+len(path) and every layer holds exactly the
	// state a plain Forward of the path's tokens leaves. It returns the kept nodes' taps, in path order, when
	// ForwardTree asked for taps (nil otherwise); they stay valid until the session's next Forward. A path
	// that is not a root's chain of children is refused and the tree stays pending.
	KeepPath(ctx context.Context, path []int) (Taps, error)
}
