fn main() {
    moat_guest::build::prepare().expect("preparing the plugin's WIT");
}
