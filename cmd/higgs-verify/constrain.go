package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/higgs-go/higgs/app/verify"
)

// readConstrain reads bench --constrain: "" (off), json_object, or a JSON Schema file.
func readConstrain(arg string) (*verify.ConstrainOptions, error) {
	switch arg {
	case "":
		return nil, nil
	case "json_object":
		return &verify.ConstrainOptions{Name: arg}, nil
	}
	doc, err := os.ReadFile(arg)
	if err != nil {
		return nil, fmt.Errorf("%w: --constrain: %w", verify.ErrBadInput, err)
	}
	return &verify.ConstrainOptions{Name: filepath.Base(arg), Schema: doc}, nil
}
