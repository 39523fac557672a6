pub use credit_core::*;
