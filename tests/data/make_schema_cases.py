import json
D = lambda v: json.dumps(v, ensure_ascii=False)
C = []
def case(name, schema, valid=(), invalid=(), error=None, **kw):
    c = {"name": name, "schema": schema, "valid": [v if isinstance(v, str) and kw.get("raw") else D(v) for v in valid],
         "invalid": [v if isinstance(v, str) and kw.get("raw") else D(v) for v in invalid]}
    if kw.get("raw_texts"):
        c["valid"] = list(valid); c["invalid"] = list(invalid)
    if error: c["error"] = error
    C.append(c)
T = lambda name, schema, valid=(), invalid=(): case(name, schema, valid, invalid, raw_texts=True)
# texts are given as JSON texts (raw_texts) so whitespace and escapes are exact
T("type_string", {"type": "string"}, ['"abc"', '""', '"a\\nb"', '"\\u00e9\\/"', '"😀"'], ['1', 'null', '"a\nb"', '"abc'])
T("type_integer", {"type": "integer"}, ['0', '-5', '123456789012'], ['1.5', '"1"', '01', '1.0e'])
T("type_number", {"type": "number"}, ['1.5', '-0.25', '1e10', '2E-3', '0', '-7'], ['"1"', '.5', '1.', '+1', '[1]'])
T("type_boolean_null", {"type": ["boolean", "null"]}, ['true', 'false', 'null'], ['0', '"true"', 'nul'])
T("type_array_of_types", {"type": ["string", "integer"]}, ['"x"', '3'], ['3.5', 'null', '{}'])
T("no_type_any_instance", {"properties": {"a": {"type": "integer"}}}, ['{"a": 1}', '"str"', '5', '{}', '[1, "x"]'], ['{"a": "x"}', '{"a": 1.5}'])
T("properties_required", {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}, "required": ["a"]},
  ['{"a": "x"}', '{"a": "x", "b": 2}', '{"a": "x", "c": true}', '{"a":"x","b":2}'], ['{"b": 2}', '{"a": 1}', '{}', '{"a": "x", "b": "2"}'])
T("additional_properties_false", {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False},
  ['{"a": "x"}', '{}'], ['{"a": "x", "c": 1}', '{"c": 1}'])
T("additional_properties_schema", {"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": {"type": "integer"}},
  ['{"a": "x", "z": 5}', '{"z": 5, "y": 6}', '{"ab": 1}'], ['{"a": "x", "z": "y"}', '{"a": "x", "a": 1}', '{"z": null}'])
T("required_without_properties", {"type": "object", "required": ["x"]}, ['{"x": 1}', '{"x": {"y": []}}'], ['{}', '{"y": 1}'])
T("object_any_whitespace", {"type": "object"}, ['{}', '{ }', '{"a": [1, {"b": null}]}', '{\n  "a": 1\n}', '{"a":1,"b":"c"}'], ['[]', '{"a" 1}', '{,}'])
T("array_items", {"type": "array", "items": {"type": "integer"}}, ['[]', '[1, 2, 3]', '[1,2]', '[ ]'], ['[1, "a"]', '[1.5]', '[1,]', '{}'])
T("array_min_max_items", {"type": "array", "minItems": 2, "maxItems": 3}, ['[1, 2]', '[1, "a", null]'], ['[]', '[1]', '[1, 2, 3, 4]'])
T("prefix_items_2020", {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "array",
  "prefixItems": [{"type": "string"}, {"type": "integer"}], "items": False}, ['[]', '["a"]', '["a", 1]'], ['[1]', '["a", 1, 2]', '["a", "b"]'])
T("items_array_draft4", {"$schema": "http://json-schema.org/draft-04/schema#", "type": "array", "items": [{"type": "string"}],
  "additionalItems": {"type": "integer"}}, ['["a", 1, 2]', '["a"]', '[]'], ['["a", "b"]', '[1]'])
T("enum_values", {"enum": ["red", "green", 1, None, {"a": 1}, [1, 2]]}, ['"red"', '1', '1.0', 'null', '{"a": 1}', '[1, 2]'],
  ['"blue"', '2', '{"a": 2}', '[2, 1]', 'true'])
T("enum_objects_filtered", {"type": "object", "properties": {"a": {"type": "integer", "minimum": 2}}, "required": ["a"],
  "additionalProperties": False, "enum": [{"a": 1}, {"a": 2}, {"a": 3, "b": 1}, {"b": 1}, {"a": 5}]},
  ['{"a": 2}', '{"a": 5}'], ['{"a": 1}', '{"a": 3, "b": 1}', '{"b": 1}', '{"a": 3}'])
T("const_string", {"const": "x\"y"}, ['"x\\"y"'], ['"xy"', '"x\\"y "'])
T("enum_with_type", {"type": "string", "enum": ["a", 1, "bb"], "maxLength": 1}, ['"a"'], ['1', '"bb"', '"c"'])
T("any_of", {"anyOf": [{"type": "string", "maxLength": 2}, {"type": "integer", "minimum": 10}]}, ['"ab"', '12', '""'], ['"abc"', '5', 'null'])
T("any_of_with_siblings", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
  "anyOf": [{"required": ["a"]}, {"required": ["b"]}]}, ['{"a": 1}', '{"b": 2}', '{"a": 1, "b": 2}'], ['{}', '{"a": "x"}', '"s"'])
T("one_of_by_type", {"oneOf": [{"type": "string"}, {"type": "integer"}]}, ['"a"', '3'], ['1.5', 'null'])
T("one_of_discriminator", {"oneOf": [
    {"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}}, "required": ["kind", "r"]},
    {"type": "object", "properties": {"kind": {"const": "square"}, "side": {"type": "number"}}, "required": ["kind", "side"]}]},
  ['{"kind": "circle", "r": 1.5}', '{"kind": "square", "side": 2}'], ['{"kind": "circle", "side": 2}', '{"kind": "triangle"}', '{"r": 1}'])
T("one_of_required_keys", {"type": "object", "properties": {"r": {"type": "number"}, "s": {"type": "number"}, "b": {}, "h": {}},
  "oneOf": [{"required": ["r"]}, {"required": ["s"]}, {"required": ["b", "h"]}]},
  ['{"r": 1}', '{"s": 2}', '{"b": 1, "h": 2}', '{"r": 1, "b": 2}', '{"b": 1, "h": 2, "x": 3}'],
  ['{}', '{"r": 1, "s": 2}', '{"r": 1, "b": 1, "h": 2}', '{"b": 1}', '{"r": "x"}'])
case("one_of_overlap_refused", {"oneOf": [{"type": "integer"}, {"minimum": 0}]}, error="oneOf: branches 0 and 1 may both match")
T("all_of_merge", {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
  {"properties": {"b": {"type": "string"}}, "required": ["b"]}]}, ['{"a": 1, "b": "x"}'], ['{"a": 1}', '{"b": "x"}', '{"a": "1", "b": "x"}'])
T("all_of_additional_false", {"allOf": [{"type": "object", "properties": {"a": {}}, "additionalProperties": False},
  {"properties": {"b": {}}}]}, ['{"a": 1}', '{}'], ['{"a": 1, "b": 2}', '{"b": 2}'])
T("all_of_two_any_of", {"allOf": [{"anyOf": [{"type": "integer"}, {"type": "string"}]}, {"anyOf": [{"minimum": 5}, {"maxLength": 1}]}]},
  ['5', '7', '"a"', '1', '"ab"'], ['1.5', 'null'])
T("all_of_bounds", {"allOf": [{"type": "integer", "minimum": 3}, {"maximum": 5}, {"minimum": 4}]}, ['4', '5'], ['3', '6'])
T("ref_defs", {"$defs": {"pos": {"type": "integer", "minimum": 1}}, "type": "array", "items": {"$ref": "#/$defs/pos"}}, ['[1, 2]', '[]'], ['[0]', '[1, -1]'])
T("ref_recursive_tree", {"$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer"},
  "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["value"], "additionalProperties": False}},
  "$ref": "#/$defs/node"}, ['{"value": 1}', '{"value": 1, "children": [{"value": 2, "children": [{"value": 3}, {"value": 4, "children": []}]}]}'],
  ['{"value": 1, "children": [{"children": []}]}', '{"value": 1, "children": [{"value": 2, "x": 1}]}'])
T("ref_definitions_draft7", {"$schema": "http://json-schema.org/draft-07/schema#", "definitions": {"name": {"type": "string", "minLength": 1}},
  "type": "object", "properties": {"first": {"$ref": "#/definitions/name"}}, "required": ["first"]}, ['{"first": "A"}'], ['{"first": ""}', '{}'])
T("ref_with_siblings", {"$defs": {"o": {"type": "object", "properties": {"a": {"type": "integer"}}}},
  "$ref": "#/$defs/o", "required": ["a"]}, ['{"a": 1}'], ['{}', '{"a": "x"}'])
T("min_max_length_code_points", {"type": "string", "minLength": 2, "maxLength": 3},
  ['"ab"', '"日本"', '"😀😀"', '"\\ud83d\\ude00x"', '"a\\nb"', '"\\"\\\\"'], ['"a"', '"😀"', '"abcd"', '"\\ud83d\\ude00"', '""'])
T("pattern_anchored", {"type": "string", "pattern": "^[a-z]+[0-9]$"}, ['"ab1"', '"z9"'], ['"ab"', '"1ab1"', '"ab12"'])
T("pattern_unanchored", {"type": "string", "pattern": "[0-9]{3}"}, ['"ab123cd"', '"123"', '"x\\n1234"'], ['"12a"', '""'])
T("pattern_json_escapes", {"type": "string", "pattern": "^a\"b\\\\c\\td$"}, ['"a\\"b\\\\c\\td"'], ['"a\\"b\\\\\\\\c\\td"', '"a\\"bc\\td"'])
T("pattern_negated_class", {"type": "string", "pattern": "^[^a]{2}$"}, ['"bc"', '"\\"\\\\"', '"\\n\\t"'], ['"ab"', '"a"', '"bcd"'])
T("format_date", {"type": "string", "format": "date"}, ['"2024-02-29"', '"2023-12-31"', '"2000-02-29"'],
  ['"2023-02-29"', '"1900-02-29"', '"2024-13-01"', '"2024-1-01"', '"2024-04-31"'])
T("format_date_time", {"type": "string", "format": "date-time"}, ['"2024-01-02T03:04:05Z"', '"2024-01-02T03:04:05.123+02:00"'],
  ['"2024-01-02 03:04:05"', '"2024-01-02T25:04:05Z"', '"2024-01-02T03:04:05"'])
T("format_time", {"type": "string", "format": "time"}, ['"03:04:05Z"', '"23:59:59.5-01:30"'], ['"24:00:00Z"', '"03:04Z"'])
T("format_uuid", {"type": "string", "format": "uuid"}, ['"123e4567-e89b-12d3-a456-426614174000"'], ['"123e4567e89b12d3a456426614174000"', '"123e4567-e89b-12d3-a456-42661417400"'])
T("format_email", {"type": "string", "format": "email"}, ['"a.b+c@example.com"'], ['"abc"', '"a.b"'])
T("format_uri", {"type": "string", "format": "uri"}, ['"https://example.com/a/b?x=1#f"', '"ftp://h:21/"'], ['"example.com"', '"/relative"'])
T("format_ipv4", {"type": "string", "format": "ipv4"}, ['"192.168.0.1"', '"0.0.0.0"'], ['"256.1.1.1"', '"1.2.3"', '"01.2.3.4"'])
T("integer_range", {"type": "integer", "minimum": -15, "maximum": 120}, ['-15', '0', '120', '99', '-9', '100'], ['-16', '121', '1000', '-100', '200'])
T("integer_exclusive", {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10}, ['1', '9'], ['0', '10', '-1'])
T("integer_exclusive_draft4", {"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer", "minimum": 5, "exclusiveMinimum": True}, ['6', '100'], ['5', '4'])
T("integer_fractional_bounds", {"type": "integer", "minimum": 1.5, "maximum": 3.5}, ['2', '3'], ['1', '4'])
T("number_range", {"type": "number", "minimum": -1, "exclusiveMaximum": 2}, ['-1', '-0.5', '1.999', '0', '1', '-1.0'],
  ['-1.01', '2', '2.0', '2.5', '-2', '10'])
T("number_exclusive_zero", {"type": "number", "exclusiveMinimum": 0}, ['0.001', '5', '12.5'], ['0', '0.0', '-0.5'])
T("multiple_of_integer", {"type": "integer", "multipleOf": 7}, ['0', '14', '-21', '700'], ['15', '-1', '7.5'])
T("multiple_of_decimal", {"type": "number", "multipleOf": 0.5}, [], [])
case("unique_items_refused", {"type": "array", "uniqueItems": True}, error="uniqueItems is not supported")
case("error_names_json_path", {"properties": {"tags": {"type": "array", "uniqueItems": True}}}, error="properties.tags: uniqueItems is not supported")
T("pattern_properties", {"type": "object", "properties": {"name": {"type": "string"}}, "patternProperties": {"^x-": {"type": "integer"}},
  "additionalProperties": False}, ['{"name": "a", "x-a": 1, "x-b": 2}', '{"x-": 3}', '{}'], ['{"x-a": "s"}', '{"y": 1}', '{"name": 1}'])
case("pattern_properties_clash_refused", {"properties": {"xa": {}}, "patternProperties": {"^x": {"type": "integer"}}},
  error="matching the listed property")
T("dependent_required", {"type": "object", "properties": {"card": {}, "billing": {}}, "dependentRequired": {"card": ["billing"]}},
  ['{}', '{"billing": 1}', '{"card": 1, "billing": 2}'], ['{"card": 1}'])
T("dependencies_schema_draft7", {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
  "properties": {"a": {}, "b": {}}, "dependencies": {"a": {"properties": {"b": {"type": "integer"}}, "required": ["b"]}}},
  ['{}', '{"b": "x"}', '{"a": 1, "b": 2}'], ['{"a": 1}', '{"a": 1, "b": "x"}'])
case("not_refused", {"not": {"pattern": "a"}}, error="not is not supported")
T("not_type", {"not": {"type": ["string", "null"]}}, ['1', '[]', '{}', 'true'], ['"a"', 'null'])
T("not_minimum", {"not": {"minimum": 2}}, ['1.5', '-3', '1'], ['2', '2.5', '"x"', 'null'])
T("not_required", {"not": {"required": ["a"]}}, ['{}', '{"b": 1}'], ['{"a": 1}', '"x"', '[]'])
T("not_any_of", {"type": ["integer", "string", "null"], "not": {"anyOf": [{"type": "string"}, {"const": None}]}}, ['3'], ['"a"', 'null'])
T("not_boolean_value", {"type": "boolean", "not": {"const": True}}, ['false'], ['true', '0'])
case("ref_missing", {"$ref": "#/$defs/nope"}, error="points to nothing")
case("ref_remote_refused", {"$ref": "https://example.com/s.json"}, error="not a local reference")
case("format_unsupported", {"type": "string", "format": "ipv6"}, error="format \"ipv6\" is not supported")
T("annotations_ignored", {"type": "string", "title": "t", "description": "d", "examples": ["x"], "x-foo": 1, "readOnly": True, "$comment": "c"}, ['"a"'], ['1'])
T("format_outside_spec_is_annotation", {"type": "string", "format": "my-format"}, ['"anything"'], ['1'])
T("boolean_schemas", {"type": "object", "properties": {"a": True, "b": False}}, ['{"a": [1]}', '{}'], ['{"b": 1}'])
# the mask tail (issue 18): search patterns trimmed at their unanchored ends, additional keys beside known names
C.append(json.loads('{"name": "additional_keys_beside_known_prefixes", "schema": {"type": "object", "properties": {"ab": {"type": "integer"}, "abc": {"type": "string"}, "é": {"type": "null"}}, "additionalProperties": {"type": "boolean"}}, "valid": ["{\\"ab\\": 1}", "{\\"abc\\": \\"x\\"}", "{\\"a\\": true}", "{\\"abd\\": false}", "{\\"abcd\\": true}", "{\\"\\": true}", "{\\"ab\\": 2, \\"b\\": true}", "{\\"a\\\\n\\": true}", "{\\"é\\": null, \\"éa\\": true, \\"e\\": false}", "{\\"ab\\\\tx\\": true}"], "invalid": ["{\\"ab\\": true}", "{\\"abc\\": 1}", "{\\"a\\": 1}", "{\\"abcd\\": 1}", "{\\"\\": 1}", "{\\"é\\": true}", "{\\"éé\\": null}", "{\\"abx\\": \\"s\\"}", "{\\"abc\\": true}"]}'))
C.append(json.loads('{"name": "additional_keys_beside_long_names", "schema": {"type": "object", "properties": {"k0xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx": {"type": "integer"}, "k1xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx": {"type": "integer"}, "k2xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx": {"type": "integer"}, "k3xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx": {"type": "integer"}, "k4xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx": {"type": "integer"}, "k5xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx": {"type": "integer"}, "k6xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx": {"type": "integer"}, "k7xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx": {"type": "integer"}, "k8xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx": {"type": "integer"}, "k9xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx": {"type": "integer"}}, "additionalProperties": {"type": "boolean"}}, "valid": ["{\\"k3xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\\": 1}", "{\\"k3x\\": true}", "{\\"k3xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxy\\": true}", "{\\"k\\": false}", "{\\"k9xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\\": true}"], "invalid": ["{\\"k3xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\\": true}", "{\\"k3x\\": 1}", "{\\"k3xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxy\\": 1}", "{\\"k9xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\\": 2}"]}'))
C.append(json.loads('{"name": "pattern_search_url", "schema": {"type": "string", "pattern": "(https?://([-\\\\w\\\\.]+)+(:\\\\d+)?(/([\\\\w/_\\\\.]*(\\\\?\\\\S+)?)?)?)"}, "valid": ["\\"https://www.example.com/path/to/resource?query=parameter\\"", "\\"see http://a.b:80/x and https://c\\"", "\\"xhttps://-\\"", "\\"http://_ tail\\""], "invalid": ["\\"htp://www.example.com\\"", "\\"https://\\"", "\\"ftp://x.y\\"", "\\"http:// x\\"", "\\"HTTP://x\\""]}'))
C.append(json.loads('{"name": "pattern_search_optional_tail", "schema": {"type": "string", "pattern": "ab(cd)?e*(f|g+)?"}, "valid": ["\\"ab\\"", "\\"xaby\\"", "\\"abcdeeg\\"", "\\"zzabf\\""], "invalid": ["\\"a b\\"", "\\"ba\\"", "\\"\\"", "\\"aXb\\""]}'))
C.append(json.loads('{"name": "pattern_search_front_trim", "schema": {"type": "string", "pattern": "x*(y|z)?[0-9]{2,5}$"}, "valid": ["\\"a12\\"", "\\"12\\"", "\\"zzz99\\"", "\\"123456\\"", "\\"x\\\\n00\\""], "invalid": ["\\"1\\"", "\\"12a\\"", "\\"a1\\"", "\\"\\""]}'))
C.append(json.loads('{"name": "pattern_search_group_alternatives", "schema": {"type": "string", "pattern": "^(ab|c+d?)+"}, "valid": ["\\"abx\\"", "\\"cz\\"", "\\"c\\"", "\\"ab\\""], "invalid": ["\\"a\\"", "\\"bc\\"", "\\"xab\\"", "\\"\\""]}'))
C.append(json.loads('{"name": "pattern_search_nullable_group", "schema": {"type": "string", "pattern": "q(r|)s{0,3}"}, "valid": ["\\"q\\"", "\\"aqz\\"", "\\"qrsss\\""], "invalid": ["\\"r\\"", "\\"\\"", "\\"Q\\""]}'))
C.append(json.loads('{"name": "pattern_search_universal", "schema": {"type": "string", "pattern": "a*|b"}, "valid": ["\\"\\"", "\\"zzz\\"", "\\"a\\\\\\"b\\\\n\\""], "invalid": ["1", "null"]}'))
C.append(json.loads('{"name": "pattern_search_counted_escapes", "schema": {"type": "string", "pattern": "\\\\u00e9{2,}\\\\u4e2d+"}, "valid": ["\\"éé中\\"", "\\"xééé中中y\\""], "invalid": ["\\"é中\\"", "\\"éé\\"", "\\"ée中\\""]}'))
# a searched run X{m} is written (?:X{0,m-1}Y)*X{m}S (search.c): runs longer than m, runs broken by one character,
# at either end, negated classes, escapes, literals
T("pattern_search_run_class", {"type": "string", "pattern": "[a-c]{3}"}, ['"abc"', '"xxabcx"', '"zab aabcc"', '"aaaa"', '"ab ab abc"', '"cbacba"'], ['"ab"', '"ab ab"', '"a-b-c"', '""', '"abXab"'])
T("pattern_search_run_digits", {"type": "string", "pattern": "\\d{2}"}, ['"a12"', '"1 23"', '"999"', '"12"'], ['"1a2"', '"1 2"', '""', '"a"'])
T("pattern_search_run_negated", {"type": "string", "pattern": "[^ ]{4}"}, ['"abcd"', '"ab cdef"', '"    xyzw"', '"a\\nbc"'], ['"abc d"', '"a b c d"', '"   "', '"ab c"'])
T("pattern_search_run_literal", {"type": "string", "pattern": "x{2}"}, ['"xx"', '"axxb"', '"xxx"', '"x x xx"'], ['"x"', '"x x"', '"XX"', '"xyx"'])
T("pattern_search_run_word", {"type": "string", "pattern": "\\w{3}"}, ['"ab1"', '"-a_1-"', '"\u00e9abc"'], ['"a_"', '"ab-cd"', '"a b c"'])
T("pattern_search_run_dot_plus", {"type": "string", "pattern": ".+"}, ['"a"', '"\\n\\nb"', '"ab\\n"', '"\u00e9"'], ['""', '"\\n"', '"\\n\\n"', '1'])
T("pattern_search_run_digit_plus", {"type": "string", "pattern": "[0-9]+"}, ['"ab1"', '"7"', '"x 42 y"'], ['"abc"', '""', '"-"'])
T("pattern_search_run_single_escape", {"type": "string", "pattern": "\\S"}, ['"  x"', '"y"'], ['" "', '""', '"\\t\\n "'])
T("pattern_search_run_negated_caret", {"type": "string", "pattern": "[^^]{2}"}, ['"ab"', '"^ab"', '"a^bc"'], ['"^"', '"a^b^"', '"^^^"', '""'])
T("pattern_search_run_anchored_end", {"type": "string", "pattern": "[a-c]{3}$"}, ['"abc"', '"xxabc"', '"aaaa"'], ['"abcx"', '"ab"', '"abc "'])
# a pattern left unbalanced is refused (the search wrapper's own brackets must not close it)
case("pattern_unclosed_paren_refused", {"type": "string", "pattern": "(a"}, error="pattern: regex: unbalanced parentheses: '(' is never closed at offset 0")
case("pattern_unmatched_paren_refused", {"type": "string", "pattern": "a)|b"}, error="pattern: regex: unbalanced parentheses: ')' without '(' at offset 1")
case("pattern_trailing_backslash_refused", {"type": "string", "pattern": "ab\\"}, error="pattern: regex: trailing backslash at offset 2")
case("pattern_unclosed_class_refused", {"properties": {"u": {"type": "string", "pattern": "x[ab"}}}, error="properties.u: pattern: regex: unterminated character class at offset 1")
# issue 18 (coverage): a schema pinned to values (enum/const, through allOf / $ref / every anyOf branch) keeps
# the values valid under the whole schema, every keyword evaluated on each value (2020-12 validation vocabulary)
T("pinned_not_enum", {"allOf": [{"enum": [1, 2, "a", True, {"a": 1}]}, {"not": {"enum": [2, "b"]}}]},
  ['1', '"a"', 'true', '{"a": 1}', '1.0'], ['2', '2.0', '3', '"b"', 'false'])
T("pinned_numbers_by_value", {"allOf": [{"enum": [1, 2.0, 3]}, {"not": {"const": 2}}, {"not": {"const": 3.0}}]}, ['1', '1.0'], ['2', '2.0', '3', '3.0'])
T("pinned_bool_is_not_number", {"enum": [True, 1, 0, False], "not": {"const": 1}}, ['true', '0', 'false'], ['1', '1.0'])
T("pinned_one_of_overlapping", {"enum": [1, 5, 10, 15], "oneOf": [{"multipleOf": 3}, {"multipleOf": 5}]}, ['5', '10'], ['15', '1', '3'])
T("pinned_if_then_else", {"enum": [1, 5, 12, 20, 22], "if": {"maximum": 10}, "then": {"minimum": 5}, "else": {"multipleOf": 4}},
  ['5', '12', '20'], ['1', '22'])
T("pinned_property_names_pattern_properties", {"enum": [{"a1": 1}, {"b": 2}, {"a2": "x"}, {"ab": "y"}],
  "propertyNames": {"pattern": "^a"}, "patternProperties": {"[0-9]$": {"type": "integer"}}}, ['{"a1": 1}', '{"ab": "y"}'], ['{"b": 2}', '{"a2": "x"}'])
T("pinned_contains_unique_items", {"enum": [[1, "x"], [1, 1], ["x"], [1, 1.0], [3, "y", 4]], "uniqueItems": True,
  "contains": {"type": "integer"}, "maxContains": 1}, ['[1, "x"]'], ['[1, 1]', '["x"]', '[1, 1.0]', '[3, "y", 4]'])
T("pinned_ref_target", {"$defs": {"c": {"enum": ["r", "g", "b"]}}, "$ref": "#/$defs/c", "not": {"const": "g"}}, ['"r"', '"b"'], ['"g"', '"x"'])
T("pinned_any_of_branches", {"anyOf": [{"const": "x"}, {"enum": ["y", "z"]}], "not": {"enum": ["z"]}}, ['"x"', '"y"'], ['"z"', '"w"'])
T("pinned_dependent_required", {"enum": [{"a": 1}, {"a": 1, "b": 2}, {"c": 3}], "dependentRequired": {"a": ["b"]},
  "additionalProperties": {"maximum": 2}}, ['{"a": 1, "b": 2}'], ['{"a": 1}', '{"c": 3}'])
T("pinned_through_all_of", {"type": ["object", "string"], "allOf": [{"enum": ["p", 7, {}]}], "not": {"type": "string"}}, ['{}'], ['"p"', '7', '{"a": 1}'])
case("pinned_format_refused", {"enum": ["a@b.c"], "format": "email", "not": {"const": 1}}, error="not is not supported")
# pattern with minLength / maxLength (code points) where the regex's lengths are plain
T("pattern_length_implied", {"type": "string", "pattern": "^[0-9]{4}$", "minLength": 3, "maxLength": 4}, ['"1234"'], ['"123"', '"12345"', '"12a4"'])
T("pattern_length_class_bounds", {"type": "string", "pattern": "^[a-z0-9_.]+$", "minLength": 2, "maxLength": 5},
  ['"ab"', '"a.b_1"'], ['"a"', '"abcdef"', '"A"', '""'])
T("pattern_length_fixed_prefix", {"type": "string", "pattern": "^id-[0-9]*$", "minLength": 5, "maxLength": 7},
  ['"id-12"', '"id-1234"'], ['"id-1"', '"id-12345"', '"id-ab"', '"xid-12"'])
T("pattern_length_code_points", {"type": "string", "pattern": "^[^,]*$", "maxLength": 2},
  ['"éé"', '"😀a"', '""', '"a\\n"'], ['"ééé"', '"a,"', '"abc"', '"a\\n\\t"'])
T("pattern_length_unanchored_exact", {"type": "string", "pattern": "[0-9]{3}", "maxLength": 3}, ['"123"'], ['"1234"', '"a123"', '"12"'])
T("pattern_length_unanchored_min", {"type": "string", "pattern": "[0-9]{3}", "minLength": 2}, ['"x123"', '"123"'], ['"12"', '"1a2"'])
T("pattern_length_impossible", {"type": ["string", "null"], "pattern": "^[a-z]{5}$", "maxLength": 3}, ['null'], ['"abcde"', '"abc"'])
case("pattern_length_two_parts_refused", {"type": "string", "pattern": "^[a-z]+-[a-z]+$", "maxLength": 5},
  error="pattern with minLength/maxLength is not supported")
# minProperties / maxProperties counted in the property chain
T("min_properties_additional", {"type": "object", "minProperties": 1, "additionalProperties": {"type": "string"}},
  ['{"a": "x"}', '{"a": "x", "b": "y"}'], ['{}', '{"a": 1}', '{ }'])
T("min_properties_optional_known", {"type": "object", "properties": {"a": {}, "b": {}}, "additionalProperties": False, "minProperties": 1},
  ['{"a": 1}', '{"b": 2}', '{"a": 1, "b": 2}'], ['{}', '{"c": 1}'])
T("min_properties_beyond_required", {"type": "object", "properties": {"a": {"type": "integer"}, "b": {}, "c": {}}, "required": ["a"], "minProperties": 2},
  ['{"a": 1, "b": 2}', '{"a": 1, "x": 3}', '{"a": 1, "b": 1, "c": 1}', '{"a": 1, "c": 1, "x": 1, "y": 2}'], ['{"a": 1}', '{"b": 1, "c": 1}', '{"a": "1", "b": 2}'])
T("max_properties_counted", {"type": "object", "properties": {"a": {}}, "required": ["a"], "maxProperties": 2},
  ['{"a": 1}', '{"a": 1, "z": 2}'], ['{"a": 1, "y": 2, "z": 3}', '{}'])
T("min_max_properties", {"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": 2, "maxProperties": 3},
  ['{"a": 1, "b": 2}', '{"a": 1, "b": 2, "c": 3}'], ['{"a": 1}', '{"a": 1, "b": 2, "c": 3, "d": 4}', '{"a": 1, "b": "x"}', '{}'])
# not by De Morgan: over several required keys, allOf, several keywords, properties
T("not_required_several", {"type": "object", "not": {"required": ["a", "b"]}},
  ['{}', '{"a": 1}', '{"b": 1}', '{"a": 1, "c": 2}'], ['{"a": 1, "b": 2}', '{"b": 1, "a": 1, "c": 3}', '"x"'])
T("not_all_of", {"type": "integer", "not": {"allOf": [{"minimum": 3}, {"maximum": 5}]}}, ['2', '6', '-1'], ['3', '4', '5', '"x"'])
T("not_keywords_together", {"not": {"type": "string", "minLength": 3}}, ['"ab"', '1', 'null', '[]', '""'], ['"abc"', '"abcd"'])
T("not_properties", {"type": "object", "not": {"properties": {"a": {"type": "string"}}}},
  ['{"a": 1}', '{"a": null, "b": "x"}'], ['{}', '{"a": "x"}', '{"b": 1}'])
T("one_of_exclusive_by_not_required", {"type": "object", "properties": {"l": {"type": "number"}, "w": {"type": "number"}, "r": {"type": "number"}},
  "oneOf": [{"required": ["l", "w"], "not": {"required": ["r"]}}, {"required": ["r"], "not": {"required": ["l", "w"]}}]},
  ['{"l": 1, "w": 2}', '{"r": 3}', '{"l": 1, "r": 3}'], ['{"l": 1, "w": 2, "r": 3}', '{}', '{"l": 1}', '{"w": 1, "r": 2, "l": 3}'])
case("one_of_any_of_overlap_refused", {"oneOf": [{"anyOf": [{"type": "string"}, {"type": "integer"}]}, {"type": "integer"}]},
  error="oneOf: branches 0 and 1 may both match")
T("format_hostname", {"type": "string", "format": "hostname"},
  ['"example.com"', '"a"', '"xn--bcher-kva.example"', '"a1-b2.c3"', '"' + "a" * 63 + '.com"', '"a.b.c.d.e.f.g.h"'],
  ['"-a.com"', '"a-.com"', '"a_b.com"', '"a..b"', '"' + "a" * 64 + '.com"', '"exa mple.com"', '""'])
# oneOf with overlapping branches: branch i and not branch j (exactly one), where not has a positive form
T("one_of_difference_required_keys", {"type": "object", "oneOf": [{"required": ["a"], "properties": {"a": {"type": "string"}}},
  {"required": ["b"], "properties": {"b": {"type": "string"}}}]},
  ['{"a": "x"}', '{"b": "y"}', '{"a": "x", "b": 1}', '{"b": "y", "a": 1}'], ['{"a": "x", "b": "y"}', '{}', '{"c": 1}', '{"a": 1}'])
T("one_of_difference_types", {"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]}, ['"abcd"'], ['"abc"', '""', '1'])
T("one_of_difference_bounds", {"type": "integer", "oneOf": [{"maximum": 2}, {"maximum": 5}]}, ['3', '5'], ['2', '0', '6'])
case("one_of_difference_pattern_refused", {"oneOf": [{"type": "string"}, {"type": "string", "pattern": "^a"}]}, error="may both match")
C[:] = [c for c in C if c["name"] != "multiple_of_decimal"]
json.dump(C, open("tests/data/schema_cases.json", "w"), indent=1, ensure_ascii=False)
print(len(C))
