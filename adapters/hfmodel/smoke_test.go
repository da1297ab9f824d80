package hfmodel

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSmokeQwen3(t *testing.T) {
	c, err := ParseConfig([]byte(`{"architectures":["Qwen3ForCausalLM"],"model_type":"qwen3","hidden_size":2560,"intermediate_size":9728,"num_hidden_layers":36,"num_attention_heads":32,"num_key_value_heads":8,"head_dim":128,"vocab_size":151936,"max_position_embeddings":40960,"rms_norm_eps":1e-6,"rope_theta":1000000,"rope_scaling":null,"tie_word_embeddings":true,"eos_token_id":151645}`))
	require.NoError(t, err)
	require.Equal(t, 128, c.RotaryDims())
}
