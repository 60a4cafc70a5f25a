//! Nothing here: the package exists for its test, `tests/model_check.rs`,
//! the exhaustive model checks of lockwarden's protocol over the models in
//! the library's `tests/model/`. Its own package lets the workspace build
//! it optimised in test builds (the root `Cargo.toml`'s profile override)
//! without optimising every other test binary.
