// Helpers shared by the files of src/config/ (not public API).
#pragma once

#include "ctxpar/config.h"

namespace ctxpar {

// Declarations obey the same type rule as LaunchConfig::Set: the field's type, or None when the
// field is nullable.
bool FieldAcceptsType(const FieldSpec& field, const FieldValue& value);
// "an integer", "a boolean", "a string": for messages.
const char* FieldTypeName(FieldType type);

}  // namespace ctxpar
