"""The public event page and its registration form."""
