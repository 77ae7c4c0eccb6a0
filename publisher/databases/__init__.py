"""A folder per database the publisher speaks, holding what only that database needs."""
