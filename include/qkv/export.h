/// @file
/// qkv/export.h: QKV_API marks what the shared libraries export. They are
/// compiled with -fvisibility=hidden, so only the classes and functions of
/// the public headers are their ABI; everything else stays inside the .so.
/// A program that links the static archives gets QKV_STATIC from them and
/// the macro means nothing.
#pragma once

#if defined(QKV_STATIC)
/// Exports a class or function from qkv's shared libraries; nothing for the
/// static archives.
#define QKV_API
#else
/// Exports a class or function from qkv's shared libraries; nothing for the
/// static archives.
#define QKV_API __attribute__((visibility("default")))
#endif
