SELECT 'portable'::text
