package models

import "fmt"

// Identity names the states m's sessions export, for the prefix cache's disk tier: records written under one
// identity are only ever read back under the same. It covers the target's weights (Fingerprint: config,
// dtypes, shapes, quantization), the drafter's, the backend with its kernel mode (the fast kernels round
// differently), and the attention KV format (Models.KVBits: 0 the backend's full precision, 32, or 8). ""
// when the weights cannot be fingerprinted (no model directory): the disk tier then refuses to start.
func Identity(m *Models) string {
	if m == nil || m.TargetDir == "" {
		return ""
	}
	fp, err := Fingerprint(m.TargetDir)
	if err != nil {
		return ""
	}
	id := fmt.Sprintf("target=%s backend=%s kv=%d", fp, m.Backend, m.KVBits)
	if m.Drafter != nil {
		dfp, err := Fingerprint(m.DrafterDir)
		if err != nil {
			return ""
		}
		id += " drafter=" + dfp
	}
	return id
}
