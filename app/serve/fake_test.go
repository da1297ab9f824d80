package serve

import (
	"time"

	"github.com/higgs-go/higgs/app/internal/fakeengine"
	"github.com/higgs-go/higgs/ports"
)

// The serving tests' toy engine lives in app/internal/fakeengine (higgsd's runner tests use it too); these
// names keep the tests short.
type (
	srvTarget    = fakeengine.Target
	srvTokenizer = fakeengine.Tokenizer
	srvTemplate  = fakeengine.Template
)

const (
	srvAlphabet   = fakeengine.Alphabet
	srvEOS        = fakeengine.EOS
	srvThinkOpen  = fakeengine.ThinkOpen
	srvThinkClose = fakeengine.ThinkClose
	srvModelVocab = fakeengine.ModelVocab
)

// srvEngine is the fake engine as Serve loads it.
func srvEngine(ctxLen int, delay time.Duration, noEOS bool) (Engine, *srvTarget) {
	p := fakeengine.New(ctxLen, delay, noEOS)
	return Engine{Target: p.Target, Drafter: p.Drafter, Tokenizer: p.Tokenizer, Template: p.Template,
		EOS: p.EOS, Name: "toy", Created: 1700000000}, p.Target
}

// srvTokens decodes fake-tokenizer text back to ids (for assertions on the toy model's output).
func srvTokens(s string) []ports.Token { return fakeengine.Tokens(s) }
