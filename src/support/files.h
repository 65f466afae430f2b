// support/files.h: the library's all-or-nothing file writing (io/files.h),
// which the command uses for outputs that must appear together
// (`qkv attention --out --weights --lse` replaces all three or none).
#pragma once

#include "io/files.h"
