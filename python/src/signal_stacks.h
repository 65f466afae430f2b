// signal_stacks.h: keeps signal handlers off the kernels' stacks (see the .cpp).
#pragma once

namespace qkvpy {

// Called once, at import, on the importing thread.
void protect_signal_stacks();

}  // namespace qkvpy
