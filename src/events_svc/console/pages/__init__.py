"""The console's pages, one module per area; each calls the same verbs as the admin API."""
