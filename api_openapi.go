// api_openapi.go — GET /openapi.json: the OpenAPI 3.1 document of the API, hand-written in
// api_openapi.yaml and api_openapi_components.yaml (from docs/API.md and docs/DESIGN.md) and embedded in
// the binary.
//
// Entry points: openAPIDocument (the document as a JSON value), server.handleOpenAPI (the route).
// Rules: the two YAML files are the one source (the second is the document's `components`); it is turned into JSON on each request (a few milliseconds, no
// state kept); public like every GET outside /v1 (dashboardPage, api.go): it holds only the contract. The tests
// keep it equal to routes() and prove its request examples are accepted (api_openapi_test.go).
package main

import (
	_ "embed"
	"fmt"
	"net/http"

	"gopkg.in/yaml.v3"
)

//go:embed api_openapi.yaml
var openAPIYAML []byte

//go:embed api_openapi_components.yaml
var openAPIComponentsYAML []byte

// openAPIDocument parses the embedded document into JSON-ready values (maps with string keys).
func openAPIDocument() (map[string]any, error) {
	var doc, comps map[string]any
	if err := yaml.Unmarshal(openAPIYAML, &doc); err != nil {
		return nil, fmt.Errorf("the embedded OpenAPI document does not parse: %w", err)
	}
	if err := yaml.Unmarshal(openAPIComponentsYAML, &comps); err != nil {
		return nil, fmt.Errorf("the embedded OpenAPI components do not parse: %w", err)
	}
	if doc == nil || comps["components"] == nil {
		return nil, fmt.Errorf("the embedded OpenAPI document is incomplete")
	}
	doc["components"] = comps["components"]
	v, err := jsonReady(doc)
	if err != nil {
		return nil, err
	}
	return v.(map[string]any), nil
}

// jsonReady checks that every map of a decoded YAML value has string keys (yaml.v3 gives
// map[string]any then), so encoding/json can write it.
func jsonReady(v any) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			c, err := jsonReady(e)
			if err != nil {
				return nil, fmt.Errorf("%s.%w", k, err)
			}
			x[k] = c
		}
	case []any:
		for i, e := range x {
			c, err := jsonReady(e)
			if err != nil {
				return nil, fmt.Errorf("%d.%w", i, err)
			}
			x[i] = c
		}
	case map[any]any:
		return nil, fmt.Errorf("a map with a non-string key in the OpenAPI document")
	}
	return v, nil
}

func (s *server) handleOpenAPI(w http.ResponseWriter, r *http.Request) error {
	doc, err := openAPIDocument()
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, doc)
	return nil
}
