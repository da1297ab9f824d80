package tokenizer

// GPT-2's reversible byte↔unicode map: printable Latin-1 bytes stand for themselves and the other 68 bytes
// are shifted to U+0100 and up, so every byte is one visible character in vocab strings.
var (
	byteToRune [256]rune
	runeToByte = make(map[rune]byte, 256)
)

func init() {
	n := 0
	for b := 0; b < 256; b++ {
		printable := (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
		if printable {
			byteToRune[b] = rune(b)
		} else {
			byteToRune[b] = rune(256 + n)
			n++
		}
		runeToByte[byteToRune[b]] = byte(b)
	}
}

// byteLevelEncode maps raw bytes to their byte-level character string.
func byteLevelEncode(s string) string {
	out := make([]rune, len(s))
	for i := 0; i < len(s); i++ {
		out[i] = byteToRune[s[i]]
	}
	return string(out)
}

// byteLevelTokenBytes is the ByteLevel decoder's per-token rule: when every character of the token is in the
// byte map the token stands for those bytes, otherwise (an added token such as "<think>\n") for its own UTF-8.
func byteLevelTokenBytes(tok string) []byte {
	out := make([]byte, 0, len(tok))
	for _, r := range tok {
		b, ok := runeToByte[r]
		if !ok {
			return []byte(tok)
		}
		out = append(out, b)
	}
	return out
}
