//! Holds no code: its dependencies give every third-party crate the features the whole
//! workspace builds it with (.config/hakari.toml).
