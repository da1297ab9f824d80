package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/higgs-go/higgs/app"
)

// readConstrain reads bench --constrain: "" (off), json_object, or a JSON Schema file.
func readConstrain(arg string) (*app.ConstrainOptions, error) {
	switch arg {
	case "":
		return nil, nil
	case "json_object":
		return &app.ConstrainOptions{Name: arg}, nil
	}
	doc, err := os.ReadFile(arg)
	if err != nil {
		return nil, fmt.Errorf("%w: --constrain: %w", app.ErrBadInput, err)
	}
	return &app.ConstrainOptions{Name: filepath.Base(arg), Schema: doc}, nil
}
