package tokenizer

// ClearCache empties the word cache (tests and benchmarks only).
func (t *Tokenizer) ClearCache() {
	t.model.cache.mu.Lock()
	clear(t.model.cache.m)
	t.model.cache.mu.Unlock()
}
