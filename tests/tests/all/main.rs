//! One test binary for everything: fewer link steps on small machines.

mod echo;
