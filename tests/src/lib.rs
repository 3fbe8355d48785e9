//! Cross-process integration tests (real binaries, real clients). Helpers live here; the
//! tests are under `tests/tests/`.
