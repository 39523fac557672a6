//! CLI tests: the real `credit` binary on the shipped fixtures. One test binary (`autotests =
//! false`), a module per subcommand, plus `errors` for every bad-input fixture.

mod advantages;
mod against;
mod analyze;
mod compare;
mod dependencies;
mod errors;
mod explorer;
mod fuzz;
mod graph;
mod memory;
mod methods;
mod outputs;
mod readme;
mod report;
mod structure;
mod train;
mod util;
mod verl;
mod verl_registry;
mod watch;
